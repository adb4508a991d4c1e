//! Sign-in sessions on SQLite and PostgreSQL: a session lasts until it
//! expires or is ended, a sign-in purges expired ones, and a token is
//! never stored twice.

use std::time::Duration;

use baton::store::Session;
use domain::time::Ts;

use crate::common::{Kind, TestDb};
use crate::per_backend;

per_backend!(cases:
    sessions_last_until_they_expire_or_end,
);

mod cases {
    use super::*;

    pub async fn sessions_last_until_they_expire_or_end(kind: Kind) {
        let db = TestDb::new(kind).await;
        let s = db.store().await;
        let t0 = Ts::now();
        let hour = Duration::from_secs(3600);
        let session = |hash: &str, user: &str, expires_at: Ts| Session {
            token_hash: hash.into(),
            user_name: user.into(),
            created_at: t0,
            expires_at,
            credential: Some(format!("credential-of-{user}")),
        };
        let alice = session("aa", "alice", t0.plus(hour));
        let old = session("bb", "bob", t0.plus(Duration::from_secs(60)));
        s.session_insert(&alice, alice.user_name.as_str().into(), t0)
            .await
            .unwrap();
        s.session_insert(&old, old.user_name.as_str().into(), t0)
            .await
            .unwrap();
        assert_eq!(s.session_get("aa", t0).await.unwrap(), Some(alice.clone()));
        assert_eq!(s.session_get("bb", t0).await.unwrap(), Some(old));
        assert_eq!(
            s.session_get("zz", t0).await.unwrap(),
            None,
            "unknown token"
        );
        assert_eq!(
            s.session_get("aa", t0.plus(hour)).await.unwrap(),
            None,
            "a session ends at its expiry"
        );
        // The same token twice is refused rather than merged.
        assert!(
            s.session_insert(&alice, alice.user_name.as_str().into(), t0)
                .await
                .is_err()
        );

        // A sign-in two minutes on removes bob's expired session for good:
        // asking as of an earlier time no longer finds it.
        let later = t0.plus(Duration::from_secs(120));
        let carol = session("cc", "carol", later.plus(hour));
        s.session_insert(&carol, carol.user_name.as_str().into(), later)
            .await
            .unwrap();
        assert_eq!(s.session_get("bb", t0).await.unwrap(), None, "purged");
        assert_eq!(s.session_get("aa", later).await.unwrap(), Some(alice));

        // Signing out ends only that session, and twice is harmless.
        s.session_delete("aa", "alice".into(), t0).await.unwrap();
        s.session_delete("aa", "alice".into(), t0).await.unwrap();
        assert_eq!(s.session_get("aa", later).await.unwrap(), None);
        assert_eq!(s.session_get("cc", later).await.unwrap(), Some(carol));
    }
}
