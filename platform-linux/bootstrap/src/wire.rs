//! The bootstrap wire protocol: a connection preface (magic, version) and length-prefixed frames,
//! all little-endian.
//!
//! ```text
//!  preface   "PXBS" (4 B)  version u16  reserved u16 (0)        sent once by each side
//!  frame     length u32 (of what follows, 1 ..= MAX_FRAME)  type u8  payload
//! ```
//!
//! Version 2 added the group barrier frames (`GroupArrive`, `GroupRelease`: a barrier among a
//! registered subset of the ranks, the host leaders of a [`crate::HostBarrier`]).
//!
//! Version 3 added `Lost` (root → leaf: a rank's connection was lost; a leaf sees only the root,
//! so this is how it learns that another leaf died, docs/design.md §9 "Liveness").
//!
//! A leaf writes its preface and `Hello` as soon as it is connected; the root writes its preface
//! with its first frame (`Welcome` or `Reject`). A peer whose first bytes are not the magic is
//! not a bootstrap peer: the root drops it without a reply.

use std::fmt;

/// The four bytes that open every bootstrap connection.
pub const MAGIC: [u8; 4] = *b"PXBS";
/// The protocol version; both sides must speak the same one.
pub const VERSION: u16 = 3;
/// Length of the preface: magic, version, reserved.
pub const PREFACE_LEN: usize = 8;
/// Largest frame accepted (type byte and payload): a length above it is a protocol error.
pub const MAX_FRAME: u32 = 16 << 20;

/// The preface this build sends.
pub const fn preface() -> [u8; PREFACE_LEN] {
    let v = VERSION.to_le_bytes();
    [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], v[0], v[1], 0, 0]
}

/// What the first bytes of a connection say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preface {
    /// Not enough bytes yet, and those received agree with the magic so far.
    Incomplete,
    /// The bytes do not start with the magic.
    WrongMagic,
    /// The magic, with this version (which may differ from ours).
    Version(u16),
}

/// Reads a preface from the start of `buf`.
pub fn read_preface(buf: &[u8]) -> Preface {
    let n = buf.len().min(MAGIC.len());
    if buf[..n] != MAGIC[..n] {
        return Preface::WrongMagic;
    }
    if buf.len() < PREFACE_LEN {
        return Preface::Incomplete;
    }
    Preface::Version(u16::from_le_bytes([buf[4], buf[5]]))
}

const T_HELLO: u8 = 1;
const T_WELCOME: u8 = 2;
const T_REJECT: u8 = 3;
const T_ABORT: u8 = 4;
const T_GATHER: u8 = 5;
const T_GATHERED: u8 = 6;
const T_ARRIVE: u8 = 7;
const T_RELEASE: u8 = 8;
const T_BYE: u8 = 9;
const T_GROUP_ARRIVE: u8 = 10;
const T_GROUP_RELEASE: u8 = 11;
const T_LOST: u8 = 12;

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Leaf → root, first frame: who the leaf is.
    Hello {
        /// The leaf's rank.
        rank: u32,
        /// The size the leaf was launched with (must equal the root's).
        nranks: u32,
        /// The leaf's process id (for logs).
        pid: u32,
        /// The leaf's host identity.
        host: Vec<u8>,
    },
    /// Root → leaf when every rank has joined.
    Welcome {
        /// The comm id the root picked.
        comm_id: u32,
        /// Host identity of every rank, by rank.
        hosts: Vec<Vec<u8>>,
    },
    /// Root → leaf: the leaf cannot join (the connection is closed after it).
    Reject {
        /// An `NrtStatus` code.
        status: u32,
        /// Why.
        reason: String,
    },
    /// Either way: the bootstrap has failed at `origin`; every rank fails with it.
    Abort {
        /// The rank that failed first.
        origin: u32,
        /// An `NrtStatus` code.
        status: u32,
        /// Why.
        reason: String,
    },
    /// Leaf → root: this rank's contribution to all-gather number `seq`.
    Gather {
        /// All-gather sequence number (1, 2, ...).
        seq: u32,
        /// The contribution.
        blob: Vec<u8>,
    },
    /// Root → leaf: the result of all-gather `seq`, by rank.
    Gathered {
        /// All-gather sequence number.
        seq: u32,
        /// Every rank's contribution, by rank.
        blobs: Vec<Vec<u8>>,
    },
    /// Leaf → root: the leaf arrived at barrier generation `gen`.
    Arrive {
        /// Barrier generation (1, 2, ..., wrapping).
        gen: u32,
    },
    /// Root → leaf: every rank has arrived at barrier generation `gen`.
    Release {
        /// Barrier generation.
        gen: u32,
    },
    /// Either way: the sender is closing cleanly; nothing follows.
    Bye,
    /// Leaf → root: the leaf arrived at generation `gen` of group barrier `group`.
    GroupArrive {
        /// Group id ([`crate::Bootstrap::register_group`] order, from 0).
        group: u32,
        /// Generation (1, 2, ..., wrapping).
        gen: u32,
    },
    /// Root → member leaf: every member of `group` has arrived at generation `gen`.
    GroupRelease {
        /// Group id.
        group: u32,
        /// Generation.
        gen: u32,
    },
    /// Root → leaf: the root lost rank `rank`'s connection (closed without `Bye`, or reset);
    /// the bootstrap has failed and every rank fails with `NRT_NETWORK_PROXY_FAILURE` naming
    /// `rank`. The root closes its side after it.
    Lost {
        /// The lost rank.
        rank: u32,
        /// What the root saw.
        reason: String,
    },
}

impl Frame {
    /// Short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Hello { .. } => "Hello",
            Self::Welcome { .. } => "Welcome",
            Self::Reject { .. } => "Reject",
            Self::Abort { .. } => "Abort",
            Self::Gather { .. } => "Gather",
            Self::Gathered { .. } => "Gathered",
            Self::Arrive { .. } => "Arrive",
            Self::Release { .. } => "Release",
            Self::Bye => "Bye",
            Self::GroupArrive { .. } => "GroupArrive",
            Self::GroupRelease { .. } => "GroupRelease",
            Self::Lost { .. } => "Lost",
        }
    }

    /// Appends the frame (length prefix included) to `out`.
    ///
    /// # Panics
    /// If the frame would exceed [`MAX_FRAME`] (callers check blob sizes first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut w = Writer(out);
        match self {
            Self::Hello {
                rank,
                nranks,
                pid,
                host,
            } => {
                w.u8(T_HELLO);
                w.u32(*rank);
                w.u32(*nranks);
                w.u32(*pid);
                w.bytes(host);
            }
            Self::Welcome { comm_id, hosts } => {
                w.u8(T_WELCOME);
                w.u32(*comm_id);
                w.list(hosts);
            }
            Self::Reject { status, reason } => {
                w.u8(T_REJECT);
                w.u32(*status);
                w.bytes(reason.as_bytes());
            }
            Self::Abort {
                origin,
                status,
                reason,
            } => {
                w.u8(T_ABORT);
                w.u32(*origin);
                w.u32(*status);
                w.bytes(reason.as_bytes());
            }
            Self::Gather { seq, blob } => {
                w.u8(T_GATHER);
                w.u32(*seq);
                w.bytes(blob);
            }
            Self::Gathered { seq, blobs } => {
                w.u8(T_GATHERED);
                w.u32(*seq);
                w.list(blobs);
            }
            Self::Arrive { gen } => {
                w.u8(T_ARRIVE);
                w.u32(*gen);
            }
            Self::Release { gen } => {
                w.u8(T_RELEASE);
                w.u32(*gen);
            }
            Self::Bye => w.u8(T_BYE),
            Self::GroupArrive { group, gen } => {
                w.u8(T_GROUP_ARRIVE);
                w.u32(*group);
                w.u32(*gen);
            }
            Self::GroupRelease { group, gen } => {
                w.u8(T_GROUP_RELEASE);
                w.u32(*group);
                w.u32(*gen);
            }
            Self::Lost { rank, reason } => {
                w.u8(T_LOST);
                w.u32(*rank);
                w.bytes(reason.as_bytes());
            }
        }
        let len = out.len() - start - 4;
        assert!(
            len <= MAX_FRAME as usize,
            "bootstrap frame {} of {len} bytes exceeds {MAX_FRAME}",
            self.name()
        );
        out[start..start + 4].copy_from_slice(&(len as u32).to_le_bytes());
    }

    /// Decodes one frame from the front of `buf`: `Ok(Some((frame, bytes used)))`, `Ok(None)`
    /// when `buf` does not hold a whole frame yet.
    ///
    /// # Errors
    /// A length of 0 or above [`MAX_FRAME`], an unknown type, or a payload that does not parse.
    pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if len == 0 || len > MAX_FRAME {
            return Err(WireError(format!(
                "frame length {len} outside 1..={MAX_FRAME}"
            )));
        }
        let total = 4 + len as usize;
        if buf.len() < total {
            return Ok(None);
        }
        let mut r = Reader(&buf[4..total]);
        let frame = match r.u8()? {
            T_HELLO => Self::Hello {
                rank: r.u32()?,
                nranks: r.u32()?,
                pid: r.u32()?,
                host: r.bytes()?,
            },
            T_WELCOME => Self::Welcome {
                comm_id: r.u32()?,
                hosts: r.list()?,
            },
            T_REJECT => Self::Reject {
                status: r.u32()?,
                reason: r.string()?,
            },
            T_ABORT => Self::Abort {
                origin: r.u32()?,
                status: r.u32()?,
                reason: r.string()?,
            },
            T_GATHER => Self::Gather {
                seq: r.u32()?,
                blob: r.bytes()?,
            },
            T_GATHERED => Self::Gathered {
                seq: r.u32()?,
                blobs: r.list()?,
            },
            T_ARRIVE => Self::Arrive { gen: r.u32()? },
            T_RELEASE => Self::Release { gen: r.u32()? },
            T_BYE => Self::Bye,
            T_GROUP_ARRIVE => Self::GroupArrive {
                group: r.u32()?,
                gen: r.u32()?,
            },
            T_GROUP_RELEASE => Self::GroupRelease {
                group: r.u32()?,
                gen: r.u32()?,
            },
            T_LOST => Self::Lost {
                rank: r.u32()?,
                reason: r.string()?,
            },
            t => return Err(WireError(format!("unknown frame type {t}"))),
        };
        if !r.0.is_empty() {
            return Err(WireError(format!(
                "{} frame has {} trailing bytes",
                frame.name(),
                r.0.len()
            )));
        }
        Ok(Some((frame, total)))
    }
}

/// A frame that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(b);
    }
    fn list(&mut self, items: &[Vec<u8>]) {
        self.u32(u32::try_from(items.len()).unwrap_or(u32::MAX));
        for b in items {
            self.bytes(b);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
        if self.0.len() < n {
            return Err(WireError(format!(
                "payload too short: need {n} more bytes, have {}",
                self.0.len()
            )));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, WireError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, WireError> {
        Ok(String::from_utf8_lossy(&self.bytes()?).into_owned())
    }
    fn list(&mut self) -> Result<Vec<Vec<u8>>, WireError> {
        let n = self.u32()? as usize;
        // Each item takes at least its 4-byte length: bound the allocation by the payload.
        if n > self.0.len() / 4 {
            return Err(WireError(format!(
                "list of {n} items in {} bytes",
                self.0.len()
            )));
        }
        (0..n).map(|_| self.bytes()).collect()
    }
}

#[cfg(test)]
mod tests;
