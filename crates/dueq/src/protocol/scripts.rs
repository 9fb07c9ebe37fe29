//! The registry of Lua scripts: one `Script` per file in `lua/`, each with `lib.lua` in front.
//!
//! `redis::Script` runs `EVALSHA` and, on `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`),
//! loads the script and retries once, so a flushed script cache heals by itself.
//! [`load_all`] loads every script at start-up so a broken script fails fast.

use std::sync::LazyLock;

use redis::Script;

use super::conn::Conn;
use crate::error::Result;

macro_rules! scripts {
    ($($name:ident => $file:literal, $keys:literal;)*) => {
        $(
            #[doc = concat!("`lua/", $file, "` with `lua/lib.lua` in front.")]
            pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
                Script::new(concat!(include_str!("lua/lib.lua"), include_str!(concat!("lua/", $file))))
            });
        )*
        /// Every script: (file name, script, number of KEYS the Rust side passes).
        pub(crate) fn all() -> Vec<(&'static str, &'static Script, usize)> {
            vec![$(($file, &*$name, $keys)),*]
        }
    };
}

scripts! {
    ENQUEUE => "enqueue.lua", 6;
    CLAIM => "claim.lua", 10;
    ACK => "ack.lua", 9;
    NACK => "nack.lua", 10;
    EXTEND => "extend.lua", 2;
    RELEASE => "release.lua", 4;
    RECOVER => "recover.lua", 11;
    CANCEL => "cancel.lua", 7;
    RESCHEDULE => "reschedule.lua", 5;
    GET => "get.lua", 8;
    STATS => "stats.lua", 6;
    HISTORY => "history.lua", 1;
    DEAD_LIST => "dead_list.lua", 3;
    DEAD_RETRY => "dead_retry.lua", 5;
    DEAD_DELETE => "dead_delete.lua", 3;
    CONFIGURE => "configure.lua", 1;
    WEBHOOK_SET => "webhook_set.lua", 1;
    WEBHOOK_CLEAR => "webhook_clear.lua", 1;
}

/// Loads every script into the server's script cache (`SCRIPT LOAD`; on a cluster the
/// command goes to every primary).
pub(crate) async fn load_all(conn: &mut Conn) -> Result<()> {
    for (_, script, _) in all() {
        script.load_async(conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each file's header names its KEYS; the registry must pass exactly that many, and every
    /// operation file must be registered.
    #[test]
    fn headers_match_registry() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol/lua");
        let registered: Vec<_> = all().iter().map(|(f, _, _)| *f).collect();
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name == "lib.lua" {
                continue;
            }
            assert!(
                registered.contains(&name.as_str()),
                "{name} is not registered"
            );
        }
        for (file, _, keys) in all() {
            let text = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
            let first = text.lines().next().unwrap();
            let op = file.trim_end_matches(".lua");
            assert!(
                first.starts_with(&format!("-- {op}: ")),
                "{file}: bad first line"
            );
            assert!(text.contains("-- Returns:"), "{file}: no Returns line");
            let header: String = text.lines().take_while(|l| l.starts_with("--")).collect();
            let declared = (1..=20)
                .filter(|i| header.contains(&format!("KEYS[{i}]")))
                .count();
            assert_eq!(declared, keys, "{file}: header declares {declared} KEYS");
            let body: String = text.lines().filter(|l| !l.starts_with("--")).collect();
            let used = (1..=20)
                .filter(|i| body.contains(&format!("KEYS[{i}]")))
                .count();
            assert_eq!(used, keys, "{file}: body uses {used} KEYS");
        }
    }
}
