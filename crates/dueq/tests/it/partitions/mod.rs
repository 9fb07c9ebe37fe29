//! Partitions (DESIGN 3, issue "one queue across a Redis Cluster"): cases C35 and C36 on a
//! 3-master cluster, the rules of a partitioned queue on one server, counts cached by a client
//! after the layout changed under it, and the regressions reviews found.

mod cached_layout;
mod cluster;
mod regressions;
mod rules;

use dueq::{Client, Queue, SettingsPatch};

pub(super) async fn partitioned(client: &Client, name: &str, n: u16) -> Queue {
    let q = client.queue(name).unwrap();
    let s = q
        .update_settings(&SettingsPatch::default().partitions(Some(n)))
        .await
        .unwrap();
    assert_eq!(s.partitions, Some(n));
    q
}
