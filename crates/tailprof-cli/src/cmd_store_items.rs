//! `tailprof items --store DIR --since …`: the slow requests the agent retained (tail-based
//! retention), with their explanation, and each class's latency from the stored
//! histograms.

use anyhow::Result;
use std::io::Write;
use std::process::ExitCode;

use tailprof_analyze::store_query::stored_items;
use tailprof_present::store_view;

use crate::cmd_top::StoreRange;

pub fn run(range: &StoreRange, json: bool, class: Option<&str>, top: usize) -> Result<ExitCode> {
    let reader = range.reader()?;
    let (from_us, to_us) = range.range()?;
    let s = stored_items(&reader, range.host.as_deref(), from_us, to_us, class);
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", tailprof_present::json::document(&s)?)?;
    } else {
        out.write_all(store_view::stored_items_text(&s, top).as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
