//! A TCP proxy the test controls, between a `baton serve` and PostgreSQL,
//! to cut a running replica off from its database the ways a network
//! does: hold every byte in both directions (packets dropped, connections
//! left open), hold one direction only (requests arrive but answers do
//! not, or the other way), delay every chunk, or reset every connection
//! and refuse new ones. `heal` relays normally again; held bytes then go
//! through, as TCP retransmits them once a route is back.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the bytes it relays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Open,
    /// Nothing gets through in either direction.
    Blackhole,
    /// The replica's bytes reach PostgreSQL; nothing comes back.
    AnswersLost,
    /// Nothing the replica sends arrives; PostgreSQL's bytes still do.
    RequestsLost,
    /// Every chunk waits this long before it is relayed.
    Delay(Duration),
    /// Open connections are reset; new ones are accepted and reset.
    Reset,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

impl Link {
    fn holds(self, direction: Direction) -> bool {
        match self {
            Link::Blackhole => true,
            Link::AnswersLost => direction == Direction::ToClient,
            Link::RequestsLost => direction == Direction::ToServer,
            Link::Open | Link::Delay(_) | Link::Reset => false,
        }
    }
}

pub struct Proxy {
    pub addr: SocketAddr,
    link: watch::Sender<Link>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (link, watch) = watch::channel(Link::Open);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watch = watch.clone();
                tokio::spawn(connection(client, upstream, watch));
            }
        });
        Proxy {
            addr,
            link,
            accepting,
        }
    }

    /// `url` (a PostgreSQL URL) with its host and port replaced by this
    /// proxy's.
    pub fn route(&self, url: &str) -> String {
        let mut url = reqwest::Url::parse(url).unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(self.addr.port())).unwrap();
        url.to_string()
    }

    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }

    pub fn blackhole(&self) {
        self.set(Link::Blackhole);
    }

    pub fn heal(&self) {
        self.set(Link::Open);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// The address a PostgreSQL URL points at.
pub fn upstream_of(url: &str) -> SocketAddr {
    let url = reqwest::Url::parse(url).unwrap();
    let host = url.host_str().unwrap();
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    format!("{host}:{}", url.port().unwrap_or(5432))
        .parse()
        .unwrap()
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut link: watch::Receiver<Link>) {
    if *link.borrow_and_update() == Link::Reset {
        return reset(&client);
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        relay(client_read, server_write, link.clone(), Direction::ToServer),
        relay(server_read, client_write, link, Direction::ToClient),
    );
}

/// Makes the coming close of `stream` a TCP reset, not an orderly FIN.
fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// Relays one direction until either side closes or the link resets
/// (then both halves are dropped with a linger of zero: a reset).
async fn relay(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
    direction: Direction,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = link.changed() => {
                if changed.is_err() || *link.borrow_and_update() == Link::Reset {
                    return reset(to.as_ref());
                }
                continue;
            }
        };
        loop {
            let now = *link.borrow_and_update();
            match now {
                Link::Reset => return reset(to.as_ref()),
                Link::Delay(by) => tokio::time::sleep(by).await,
                _ => {}
            }
            if !now.holds(direction) {
                break;
            }
            if link.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
