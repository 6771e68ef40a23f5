//! Criterion benchmarks of the proxy engine and the baselines they compare against.
