//! tailprof analyze stage (being written).
