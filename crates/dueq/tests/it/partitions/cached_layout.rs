//! A partition count cached by a client (`LAYOUT_TTL`) after the queue's layout changed under
//! it: a FLUSHALL, a count that shrank or grew, a cluster node flushed with or without
//! partition 0. Every keyed enqueue lands where every client looks, and a batch is written
//! once.

use dueq::{Client, SettingsPatch, TaskRef, TaskSpec, partition_of_id, partition_of_key};
use dueq_testkit::RedisCluster;

use super::partitioned;
use crate::support::Ctx;

/// Keys `{prefix}0..n` that a fresh client cannot find by key in queue `name`.
async fn missing_for_a_fresh_client(ctx: &Ctx, name: &str, prefix: &str, n: usize) -> Vec<String> {
    let fresh = Client::connect(&ctx.server.url()).await.unwrap();
    let q = fresh.queue(name).unwrap();
    let mut missing = Vec::new();
    for i in 0..n {
        let k = format!("{prefix}{i}");
        if q.get(&TaskRef::key(k.clone()).unwrap())
            .await
            .unwrap()
            .is_none()
        {
            missing.push(k);
        }
    }
    missing
}

/// A FLUSHALL takes a partitioned queue's count with everything else, while a client keeps
/// its layout cached (`LAYOUT_TTL`, 5 s). Its enqueues right after the wipe are refused by
/// the partitions above 0 (their count is gone), so it reads the layout again and they land
/// in the one partition a fresh client reads, findable by key and with ids of partition 0.
#[tokio::test]
async fn enqueues_routed_by_a_layout_cached_before_a_flushall_land_where_clients_look() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "wiped", 3).await;
    let specs = |prefix: &str| -> Vec<TaskSpec> {
        (0..30)
            .map(|i| {
                TaskSpec::new(b"x".to_vec())
                    .key(format!("{prefix}{i}"))
                    .delay_ms(60_000)
            })
            .collect()
    };
    q.enqueue_batch(&specs("before-")).await.unwrap();
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut ctx.server.conn())
        .unwrap();
    let done = q.enqueue_batch(&specs("after-")).await.unwrap();
    assert!(done.iter().all(|e| e.created()), "{done:?}");
    assert!(
        done.iter().all(|e| partition_of_id(e.id.as_str(), 3) == 0),
        "ids of partitions above 0: {:?}",
        done.iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
    );
    let missing = missing_for_a_fresh_client(&ctx, "wiped", "after-", 30).await;
    assert!(
        missing.is_empty(),
        "not found by a fresh client: {missing:?}"
    );
    // and one at a time, keyless too
    q.enqueue(TaskSpec::new(b"y".to_vec()).delay_ms(60_000))
        .await
        .unwrap();
    let fresh = Client::connect(&ctx.server.url()).await.unwrap();
    assert_eq!(
        fresh
            .queue("wiped")
            .unwrap()
            .stats()
            .await
            .unwrap()
            .scheduled,
        31
    );
}

/// The count of an empty queue goes from 3 to 1 while another client has 3 cached: that
/// client's enqueues are refused by partitions 1 and 2, which forget their count first, and
/// land in partition 0.
#[tokio::test]
async fn enqueues_routed_by_a_count_cached_before_it_shrank_land_where_clients_look() {
    let ctx = Ctx::new().await;
    partitioned(&ctx.client, "shrunk", 3).await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue("shrunk").unwrap();
    assert_eq!(stale.partition_stats().await.unwrap().len(), 3); // caches the count
    ctx.client
        .queue("shrunk")
        .unwrap()
        .update_settings(&SettingsPatch::default().partitions(None))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..30)
        .map(|i| {
            TaskSpec::new(b"x".to_vec())
                .key(format!("k{i}"))
                .delay_ms(60_000)
        })
        .collect();
    stale.enqueue_batch(&specs).await.unwrap();
    let missing = missing_for_a_fresh_client(&ctx, "shrunk", "k", 30).await;
    assert!(
        missing.is_empty(),
        "not found by a fresh client: {missing:?}"
    );
}

/// Keyed specs `{prefix}0..n`, due in a minute.
fn keyed_specs(prefix: &str, n: usize) -> Vec<TaskSpec> {
    (0..n)
        .map(|i| {
            TaskSpec::new(b"x".to_vec())
                .key(format!("{prefix}{i}"))
                .delay_ms(60_000)
        })
        .collect()
}

/// A queue name whose partition 1 has other keys under `a` partitions than under `b`
/// (partition_tag depends on the count).
fn name_with_other_keys(prefix: &str, a: u16, b: u16) -> String {
    (0..1000)
        .map(|i| format!("{prefix}{i}"))
        .find(|n| {
            dueq::QueueKeys::partition(n, 1, a).unwrap().meta
                != dueq::QueueKeys::partition(n, 1, b).unwrap().meta
        })
        .unwrap()
}

/// Partition p's keys depend on the count (`partition_tag(name, p, n)`): after a change 2 ->
/// 4, a client with 2 cached routes keys to partition 1 *of 2*, which forgot its count in
/// the change, so it is refused there and routes them by 4 (partition 0 is not checked).
#[tokio::test]
async fn a_count_cached_before_it_grew_is_refused_by_the_old_partition_keys() {
    let ctx = Ctx::new().await;
    let name = name_with_other_keys("grow", 2, 4);
    partitioned(&ctx.client, &name, 2).await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue(&name).unwrap();
    assert_eq!(stale.partition_stats().await.unwrap().len(), 2); // caches the count
    ctx.client
        .queue(&name)
        .unwrap()
        .update_settings(&SettingsPatch::default().partitions(Some(4)))
        .await
        .unwrap();
    stale.enqueue_batch(&keyed_specs("k", 30)).await.unwrap();
    let missing = missing_for_a_fresh_client(&ctx, &name, "k", 30).await;
    // partition 0 is not checked (documented); these went through the check of partition 1
    let via_checked: Vec<_> = missing
        .iter()
        .filter(|k| partition_of_key(k, 2) == 1)
        .collect();
    assert!(
        via_checked.is_empty(),
        "routed by the old count to partition 1 of 2, accepted, not found by a fresh client: \
         {via_checked:?} (all missing: {missing:?})"
    );
}

/// The same for a smaller count, 4 -> 2: partition 1 of 4 (other keys than partition 1 of
/// 2) forgets its count too.
#[tokio::test]
async fn a_count_cached_before_it_shrank_to_two_is_refused_by_partition_1_of_4() {
    let ctx = Ctx::new().await;
    let name = name_with_other_keys("shrink", 4, 2);
    partitioned(&ctx.client, &name, 4).await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue(&name).unwrap();
    assert_eq!(stale.partition_stats().await.unwrap().len(), 4);
    ctx.client
        .queue(&name)
        .unwrap()
        .update_settings(&SettingsPatch::default().partitions(Some(2)))
        .await
        .unwrap();
    stale.enqueue_batch(&keyed_specs("k", 40)).await.unwrap();
    let missing = missing_for_a_fresh_client(&ctx, &name, "k", 40).await;
    let via_p1: Vec<_> = missing
        .iter()
        .filter(|k| partition_of_key(k, 4) == 1)
        .collect();
    assert!(
        via_p1.is_empty(),
        "routed by the old count to partition 1 of 4, accepted, not found by a fresh client: \
         {via_p1:?} (all missing: {missing:?})"
    );
}

/// Which cluster nodes hold `key` (a node that does not answers MOVED).
fn node_of(cluster: &RedisCluster, key: &str) -> usize {
    (0..cluster.nodes().len())
        .find(|&i| {
            redis::cmd("EXISTS")
                .arg(key)
                .query::<i64>(&mut cluster.nodes()[i].conn())
                .is_ok()
        })
        .unwrap()
}

/// On a Redis Cluster a FLUSHALL (or a restart without persistence) takes one node:
/// partition 0 keeps its count (6), a partition on the flushed node loses its own. A client
/// refused there reads the layout again, finds 6 still, and sends the share there
/// unchecked: every keyed enqueue is accepted and found by key by every client.
#[tokio::test]
async fn a_cluster_node_flushed_without_partition_0_still_takes_its_keys() {
    let cluster = RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let client = Client::connect(&url).await.unwrap();
    partitioned(&client, "one_node", 6).await;
    let metas: Vec<String> = (0..6u16)
        .map(|p| dueq::QueueKeys::partition("one_node", p, 6).unwrap().meta)
        .collect();
    let zero = node_of(&cluster, &metas[0]);
    let victim = (0..3).find(|&i| i != zero).unwrap();
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut cluster.nodes()[victim].conn())
        .unwrap();
    let fresh = Client::connect(&url).await.unwrap();
    let q = fresh.queue("one_node").unwrap();
    let mut failed = Vec::new();
    for i in 0..30 {
        let k = format!("k{i}");
        if let Err(e) = q
            .enqueue(TaskSpec::new(b"x".to_vec()).key(k.clone()).delay_ms(60_000))
            .await
        {
            failed.push((k, partition_of_key(&format!("k{i}"), 6), e.to_string()));
        }
    }
    assert!(failed.is_empty(), "refused: {failed:#?}");
}

/// On a Redis Cluster the node holding partition 0 is flushed; a client with 6 cached
/// routes to partitions on the other nodes, whose metas still say 6: accepted, while a
/// fresh client reads 1 from partition 0 and never looks there.
#[ignore = "known limit, not fixed: a cluster node wipe that takes partition 0 but not the others leaves their counts, so a cached count is accepted there for up to 5 s (docs/SCALING.md)"]
#[tokio::test]
async fn a_cluster_node_flushed_with_partition_0_refuses_a_cached_count() {
    let cluster = RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let client = Client::connect(&url).await.unwrap();
    let q = partitioned(&client, "zero_node", 6).await;
    assert_eq!(q.partition_stats().await.unwrap().len(), 6);
    let meta0 = dueq::QueueKeys::new("zero_node").unwrap().meta;
    let zero = node_of(&cluster, &meta0);
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut cluster.nodes()[zero].conn())
        .unwrap();
    q.enqueue_batch(&keyed_specs("k", 30)).await.unwrap();
    let fresh = Client::connect(&url).await.unwrap();
    let f = fresh.queue("zero_node").unwrap();
    let mut missing = Vec::new();
    for i in 0..30 {
        let k = format!("k{i}");
        if f.get(&TaskRef::key(k.clone()).unwrap())
            .await
            .unwrap()
            .is_none()
        {
            missing.push(k);
        }
    }
    assert!(
        missing.is_empty(),
        "not found by a fresh client: {missing:?}"
    );
}

/// A batch of keyless tasks and one key routed to a partition of a cluster node flushed
/// without partition 0 succeeds whole (the refused share goes there unchecked), so no error
/// makes a caller send the keyless tasks again.
#[tokio::test]
async fn a_batch_with_a_share_for_a_flushed_node_is_written_once() {
    let cluster = RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let client = Client::connect(&url).await.unwrap();
    partitioned(&client, "mixed", 6).await;
    let meta0 = dueq::QueueKeys::new("mixed").unwrap().meta;
    let zero = node_of(&cluster, &meta0);
    let victim = (0..3).find(|&i| i != zero).unwrap();
    let victim_parts: Vec<u16> = (1..6u16)
        .filter(|&p| {
            node_of(
                &cluster,
                &dueq::QueueKeys::partition("mixed", p, 6).unwrap().meta,
            ) == victim
        })
        .collect();
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut cluster.nodes()[victim].conn())
        .unwrap();
    let bad_key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| victim_parts.contains(&partition_of_key(k, 6)))
        .unwrap();
    let mut batch: Vec<TaskSpec> = (0..10)
        .map(|_| TaskSpec::new(b"keyless".to_vec()).delay_ms(60_000))
        .collect();
    batch.push(TaskSpec::new(b"x".to_vec()).key(bad_key).delay_ms(60_000));
    let q = client.queue("mixed").unwrap();
    let done = q.enqueue_batch(&batch).await.unwrap();
    assert!(done.iter().all(|e| e.created()), "{done:?}");
    assert_eq!(q.stats().await.unwrap().scheduled, 11);
}
