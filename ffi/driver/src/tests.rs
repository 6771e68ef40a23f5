//! Unit tests of the C entry points through the rlib (the C programs are in `tests/`).
