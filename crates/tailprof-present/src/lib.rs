//! tailprof present stage (being written).
