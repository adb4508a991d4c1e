//! A TCP proxy the test controls, between a `baton serve` and PostgreSQL:
//! it relays bytes until told to blackhole them (connections stay open,
//! nothing gets through in either direction, as when a network drops
//! packets), then heals (what was held goes through).

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: SocketAddr,
    open: watch::Sender<bool>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, watch) = watch::channel(true);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watch = watch.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        relay(client_read, server_write, watch.clone()),
                        relay(server_read, client_write, watch),
                    );
                });
            }
        });
        Proxy {
            addr,
            open,
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

    pub fn blackhole(&self) {
        self.open.send_replace(false);
    }

    pub fn heal(&self) {
        self.open.send_replace(true);
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

async fn relay(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut open: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while !*open.borrow_and_update() {
            if open.changed().await.is_err() {
                return;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
