//! `tailprof items --store DIR --since …`: the slow requests the agent retained (tail-based
//! retention), with their explanation (and causes, when the agent kept them), and each
//! class's latency from the stored histograms; `--explain ID` shows one request.

use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;

use tailprof_analyze::store_query::stored_items;
use tailprof_present::store_view;

use crate::cmd_top::StoreRange;

pub fn run(
    range: &StoreRange,
    json: bool,
    class: Option<&str>,
    top: usize,
    explain: Option<u64>,
) -> Result<ExitCode> {
    let reader = range.reader()?;
    let (from_us, to_us) = range.range()?;
    let mut s = stored_items(&reader, range.host.as_deref(), from_us, to_us, class);
    if let Some(id) = explain {
        // `--explain ID`: the retained request(s) with this item id, whole.
        s.items.retain(|i| i.item_id == id);
        if s.items.is_empty() {
            anyhow::bail!("no retained request with item id {id} in the range (see `tailprof items --store DIR` for the ids)");
        }
    }
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", tailprof_present::json::document(&s)?)?;
    } else {
        out.write_all(store_view::stored_items_text(&s, top).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
