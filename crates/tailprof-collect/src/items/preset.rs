//! `--preset NAME[=BIN]`: ready-made probe sets for servers that ship USDT probes
//! (issue 22 item 3). A preset only expands to the options a user could write
//! (`--item-begin`, `--item-end`, `--item-class-from`, `--item-event`); [`Preset::args`]
//! is that expansion, printed by `record` and documented in docs/PROBES.md.

use std::path::{Path, PathBuf};

/// Names `--preset` accepts.
pub const PRESETS: &[&str] = &["postgresql"];

/// A preset that cannot be expanded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PresetError {
    #[error("unknown preset '{0}' (known: postgresql)")]
    Unknown(String),
    #[error("--preset postgresql: no PostgreSQL server binary found (looked in /usr/lib/postgresql/*/bin/postgres and PATH); give it as --preset postgresql=/path/to/postgres")]
    NoBinary,
}

/// The options a preset stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    pub item_begin: String,
    pub item_end: String,
    pub item_class_from: Vec<String>,
    pub item_event: Vec<String>,
}

impl Preset {
    /// The expansion as command-line options.
    pub fn args(&self) -> Vec<String> {
        let mut v = vec!["--item-begin".to_string(), self.item_begin.clone(), "--item-end".to_string(), self.item_end.clone()];
        for c in &self.item_class_from {
            v.extend(["--item-class-from".to_string(), c.clone()]);
        }
        for e in &self.item_event {
            v.extend(["--item-event".to_string(), e.clone()]);
        }
        v
    }
}

/// `postgresql` with the server binary `bin`: items = statements of simple-query messages
/// (`query__start`/`query__done`), classes = the SQL shape of `query__start`'s query text,
/// spans = heavyweight lock waits (arguments: `locktag_field2`, the relation OID of a
/// relation, page or tuple lock; `locktag_field1`, the database OID, or the transaction
/// id a row-lock wait waits for; `locktag_type`; the lock mode) and LWLock waits
/// (argument: the tranche name).
pub fn postgresql(bin: &Path) -> Preset {
    let p = |name: &str| format!("usdt:{}:postgresql:{name}", bin.display());
    Preset {
        item_begin: p("query__start"),
        item_end: p("query__done"),
        item_class_from: vec![format!("{}:arg0", p("query__start"))],
        item_event: vec![
            format!("{}:arg1,arg0,arg4,arg5", p("lock__wait__start")),
            p("lock__wait__done"),
            format!("{}:arg0:string", p("lwlock__wait__start")),
            p("lwlock__wait__done"),
        ],
    }
}

/// Expands `NAME[=BIN]`. Without `BIN`, postgresql's server is the newest
/// `/usr/lib/postgresql/VERSION/bin/postgres` (Debian, Ubuntu), else `postgres` in PATH.
pub fn expand(spec: &str) -> Result<Preset, PresetError> {
    let (name, bin) = match spec.split_once('=') {
        Some((n, b)) => (n, Some(PathBuf::from(b))),
        None => (spec, None),
    };
    match name {
        "postgresql" => {
            let bin = match bin {
                Some(b) => b,
                None => default_postgres(Path::new("/usr/lib/postgresql"))
                    .or_else(|| crate::items::uprobe::find_binary("postgres").ok())
                    .ok_or(PresetError::NoBinary)?,
            };
            Ok(postgresql(&bin))
        }
        _ => Err(PresetError::Unknown(name.to_string())),
    }
}

/// The newest `DIR/VERSION/bin/postgres` (versions compared as numbers).
fn default_postgres(dir: &Path) -> Option<PathBuf> {
    let mut best: Option<(Vec<u64>, PathBuf)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten().take(1000) {
        let name = e.file_name();
        let Some(v) = name.to_str() else { continue };
        let Some(key) = v.split('.').map(|p| p.parse::<u64>().ok()).collect::<Option<Vec<_>>>() else {
            continue;
        };
        let bin = e.path().join("bin/postgres");
        if bin.is_file() && best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((key, bin));
        }
    }
    best.map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgresql_expansion() {
        let p = expand("postgresql=/opt/pg/bin/postgres").unwrap();
        assert_eq!(
            p.args().join(" "),
            "--item-begin usdt:/opt/pg/bin/postgres:postgresql:query__start \
             --item-end usdt:/opt/pg/bin/postgres:postgresql:query__done \
             --item-class-from usdt:/opt/pg/bin/postgres:postgresql:query__start:arg0 \
             --item-event usdt:/opt/pg/bin/postgres:postgresql:lock__wait__start:arg1,arg0,arg4,arg5 \
             --item-event usdt:/opt/pg/bin/postgres:postgresql:lock__wait__done \
             --item-event usdt:/opt/pg/bin/postgres:postgresql:lwlock__wait__start:arg0:string \
             --item-event usdt:/opt/pg/bin/postgres:postgresql:lwlock__wait__done"
        );
        // Every part parses as the option it stands for.
        for e in &p.item_event {
            crate::items::events::EventSpec::parse(e).unwrap();
        }
        crate::items::classprobe::ClassSpec::parse(&p.item_class_from[0]).unwrap();
        assert!(matches!(expand("mysql"), Err(PresetError::Unknown(_))));
    }

    #[test]
    fn newest_version_is_the_default() {
        let d = std::env::temp_dir().join(format!("tailprof-preset-{}", std::process::id()));
        for v in ["9.6", "15", "13", "notaversion"] {
            std::fs::create_dir_all(d.join(v).join("bin")).unwrap();
            std::fs::write(d.join(v).join("bin/postgres"), b"").unwrap();
        }
        assert_eq!(default_postgres(&d), Some(d.join("15/bin/postgres")));
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(default_postgres(Path::new("/nonexistent/pg")), None);
    }
}
