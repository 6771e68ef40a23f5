//! The C ABI of the progress half: seam entry points, init half and `nec_*` callbacks.
