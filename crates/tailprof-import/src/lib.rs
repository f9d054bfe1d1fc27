//! tailprof import stage (being written).
