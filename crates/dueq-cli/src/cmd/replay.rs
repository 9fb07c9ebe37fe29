//! `dueq replay`: the main job. The lab (`dueq_lab::replay`) plays the order trace; this
//! command picks the Redis: `--redis`, else an embedded `redis-server` of its own.

use anyhow::Result;
use dueq_lab::ReplayArgs;
use dueq_lab::replay::command::Prepared;

use crate::embedded::EmbeddedRedis;

/// Runs the replay; fails (exit 1) when an invariant is broken.
pub async fn run(redis: Option<&str>, a: &ReplayArgs, json_out: bool) -> Result<()> {
    let prepared = Prepared::new(a, json_out)?;
    let report = match redis {
        Some(url) => prepared.play(url).await?,
        None => {
            let server = EmbeddedRedis::start(a.data_dir.as_deref()).await?;
            // on SIGINT/SIGTERM stop the embedded server too, instead of leaving it behind
            let r = tokio::select! {
                r = prepared.play(server.url()) => r,
                _ = crate::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
            };
            server.stop().await;
            r?
        }
    };
    prepared.finish(&report)
}
