//! Helpers shared by proxy-ffi's integration tests (each test binary includes this module and
//! uses what it needs).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicU32;
use std::sync::OnceLock;

use proxy_core::base::desc::{
    NetDestAddr, NetOpInfo, NetSrcAddr, EXEC_COMPLETE, NET_TRANSFER, NO_PEER,
};

/// The `libnccom_proxy.so` of this build: `$NCCOM_PROXY_LIB`, else the one cargo built next to
/// this test binary (it builds a package's library, every crate type, before its integration
/// tests), else one built now with `cargo build -p proxy-ffi` into a target directory of its own
/// (a test binary run by hand).
pub fn library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(p) = std::env::var_os("NCCOM_PROXY_LIB") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("current_exe");
        let deps = exe.parent().expect("test binary directory");
        for dir in [Some(deps), deps.parent()].into_iter().flatten() {
            let p = dir.join("libnccom_proxy.so");
            if p.is_file() {
                return p;
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let target = root.join("target/loader-tests");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .current_dir(&root)
            .args(["build", "-p", "proxy-ffi", "--target-dir"])
            .arg(&target)
            .status()
            .expect("run cargo build -p proxy-ffi");
        assert!(st.success(), "cargo build -p proxy-ffi failed");
        target.join("debug/libnccom_proxy.so")
    })
    .clone()
}

/// The address of a host word, as the op descriptors carry it.
pub fn word(w: &AtomicU32) -> u64 {
    w.as_ptr() as usize as u64
}

/// One send op to `send_peer` and one recv op from `recv_peer` with op tag `tag`, over the
/// six host words `words` (`[send idx, send hs, send cpl, recv idx, recv hs, recv cpl]`), one
/// FIFO entry per buffer of `src` / `dst` (the last entry marked `EXEC_COMPLETE`); the recv
/// side's entries name op `dst_op_idx` of their `start` call.
pub struct SendRecvPair {
    /// The send op info.
    pub send: NetOpInfo,
    /// The recv op info.
    pub recv: NetOpInfo,
    /// The send op's source entries.
    pub src: Vec<NetSrcAddr>,
    /// The recv op's destination entries.
    pub dst: Vec<NetDestAddr>,
}

/// Builds a [`SendRecvPair`] (see there).
pub fn send_recv_pair(
    send_peer: i32,
    recv_peer: i32,
    tag: u32,
    words: &[AtomicU32],
    src: &[Vec<u8>],
    dst: &mut [Vec<u8>],
    dst_op_idx: u32,
) -> SendRecvPair {
    let n = src.len() as u32;
    let send = NetOpInfo {
        send_peer,
        recv_peer: NO_PEER,
        tag,
        tx_entry_cnt: n,
        data_type_sz: 1,
        post_send_idx_addr: word(&words[0]),
        send_handshake_sem_addr: word(&words[1]),
        send_complete_sem_addr: word(&words[2]),
        ..NetOpInfo::default()
    };
    let recv = NetOpInfo {
        send_peer: NO_PEER,
        recv_peer,
        tag,
        rx_entry_cnt: dst.len() as u32,
        data_type_sz: 1,
        post_recv_idx_addr: word(&words[3]),
        recv_handshake_sem_addr: word(&words[4]),
        recv_complete_sem_addr: word(&words[5]),
        ..NetOpInfo::default()
    };
    let mark = |e: usize, len: usize| {
        if e + 1 == len {
            EXEC_COMPLETE
        } else {
            NET_TRANSFER
        }
    };
    let src_fifo = src
        .iter()
        .enumerate()
        .map(|(e, b)| NetSrcAddr {
            net_op_idx: 0,
            mark: mark(e, src.len()),
            addr: b.as_ptr() as usize as u64,
            size: b.len() as u64,
            dest_rank: NO_PEER,
            reserved: 0,
        })
        .collect();
    let len = dst.len();
    let dst_fifo = dst
        .iter_mut()
        .enumerate()
        .map(|(e, b)| NetDestAddr {
            net_op_idx: dst_op_idx,
            mark: mark(e, len),
            addr: b.as_mut_ptr() as usize as u64,
            size: b.len() as u64,
            src_rank: NO_PEER,
            reserved: 0,
        })
        .collect();
    SendRecvPair {
        send,
        recv,
        src: src_fifo,
        dst: dst_fifo,
    }
}
