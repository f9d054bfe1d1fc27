//! Issue 19, finding 2: the agent must not write into a store directory someone else
//! prepared. An unprivileged user pre-creates `/tmp/tpstore` (mode 777) with `samples` and
//! `symbols` symlinks into root's files; root then opens it as a store. Refused with one
//! line naming the fix, and nothing is written through the links.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use tailprof_store::{Store, Table};

const ATTACKER: &str = "tailprof-store-atk";

/// (uid, gid) of the attacker account (tailprof-testkit creates it; skips when not root).
fn attacker(test: &str) -> Option<(u32, u32)> {
    tailprof_testkit::unprivileged_user(ATTACKER, format!("{test} plays an unprivileged user"))
}

/// Runs `sh -c script` as the attacker.
fn as_attacker(who: (u32, u32), script: &str) {
    use std::os::unix::process::CommandExt;
    let o = Command::new("sh").args(["-c", script]).uid(who.0).gid(who.1).output().unwrap();
    assert!(o.status.success(), "{script}: {}", String::from_utf8_lossy(&o.stderr));
}

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn one_line(e: &tailprof_store::StoreError) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "one line: {s}");
    s
}

#[test]
fn finding_2_precreated_store_root_in_tmp_is_refused() {
    let Some(who) = attacker("finding_2_precreated_store_root_in_tmp_is_refused") else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A world-writable sticky directory like /tmp, and root's private files.
    let public = base.path().join("tmp");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let secret = base.path().join("root-only");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let store = public.join("tpstore");
    let s = store.display();
    let t = secret.display();
    as_attacker(who, &format!("mkdir -m 777 {s} && ln -s {t} {s}/samples && ln -s {t} {s}/symbols"));
    let e = Store::open(&store).expect_err("an attacker's store root is refused");
    let msg = one_line(&e);
    assert!(msg.contains("owned by uid") && msg.contains("choose another --store"), "{msg}");
    assert_eq!(entries(&secret), 0, "nothing written through the links");

    // Root's own store in the sticky directory is fine; an attacker's symlink inside it
    // (if they could place one) is refused by every directory the store writes.
    let mine = public.join("mine");
    let (st, _) = Store::open(&mine).unwrap();
    symlink(&secret, mine.join("symbols")).unwrap();
    let e = st.ensure_dir(&st.symbols_dir()).expect_err("a symlink inside the store is refused");
    assert!(one_line(&e).contains("symbolic link"), "{e}");
    let e = st.ensure_dir(&st.partition_dir(Table::Samples, "h", 0));
    assert!(e.is_ok(), "{e:?}");
    // A store directory that became writable by others is refused.
    let part = st.table_dir(Table::Samples);
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = st.ensure_dir(&st.partition_dir(Table::Samples, "h", 0)).expect_err("mode 777 inside the store");
    assert!(one_line(&e).contains("chmod 700"), "{e}");
    assert_eq!(entries(&secret), 0);
}

/// The same rule without a second account: a symlink on the way, a root writable by
/// others, a parent writable by others without the sticky bit.
#[test]
fn finding_2_symlinks_and_loose_modes_on_the_way_are_refused() {
    let base = tempfile::tempdir().unwrap();
    let real = base.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = base.path().join("link");
    symlink(&real, &link).unwrap();
    let e = Store::open(&link.join("store")).expect_err("a symlink on the way");
    assert!(one_line(&e).contains("symbolic link"), "{e}");
    let e = Store::open(&link).expect_err("a symlink as the root");
    assert!(one_line(&e).contains("symbolic link"), "{e}");
    assert_eq!(entries(&real), 0);

    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Store::open(&open).expect_err("a root writable by others");
    assert!(one_line(&e).contains("writable by group or others"), "{e}");
    let e = Store::open(&open.join("s")).expect_err("a parent writable by others, not sticky");
    assert!(one_line(&e).contains("writable by group or others"), "{e}");
    assert_eq!(entries(&open), 0);

    // Our own private store: created 0700, opened again fine.
    let good = base.path().join("good").join("store");
    Store::open(&good).unwrap();
    Store::open(&good).unwrap();
    let mode = std::fs::metadata(&good).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}
