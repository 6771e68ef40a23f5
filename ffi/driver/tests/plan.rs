//! The planner through C (`nrt_proxy_plan_*`), called through the rlib: what it writes is what
//! `proxy-collectives`' planner gives for the same parameters (every collective, ring and
//! direct, with streams and basic blocks and the `nec` options), and a plan too fine for the
//! FIFO limits is refused. The C side of the same calls (bad input, a ring all-reduce run on
//! the plan) is in `tests/c/`.

use std::ptr;

use nrt_proxy::*;
use proxy_abi::*;
use proxy_collectives::planner::{
    plan_blocks, Addresses, Algorithm, Buf, Collective, DataType, Instr, NecOptions, PlanParams,
    RedOp, Side,
};

fn c_params(p: &PlanParams) -> NrtProxyPlanParams {
    let mut c = std::mem::MaybeUninit::<NrtProxyPlanParams>::uninit();
    // SAFETY: a writable struct.
    let s = unsafe { nrt_proxy_plan_params_init(c.as_mut_ptr()) };
    assert_eq!(s, NRT_SUCCESS);
    // SAFETY: initialized by the call above.
    let mut c = unsafe { c.assume_init() };
    c.collective = Collective::ALL
        .iter()
        .position(|&x| x == p.collective)
        .unwrap() as u32;
    c.algorithm = Algorithm::ALL
        .iter()
        .position(|&x| x == p.algorithm)
        .unwrap() as u32;
    c.dtype = DataType::ALL.iter().position(|&x| x == p.dtype).unwrap() as u32;
    c.op = RedOp::ALL.iter().position(|&x| x == p.op).unwrap() as u32;
    c.rank = p.rank;
    c.nranks = p.nranks;
    c.root = p.root;
    c.in_place = u32::from(p.in_place);
    c.pipeline_depth = p.pipeline_depth;
    c.streams = p.streams;
    c.blocks = p.blocks;
    c.nec_early_recv = p.nec.early_recv;
    c.nec_early_send = u32::from(p.nec.early_send);
    c.nec_idx_wrap = p.nec.idx_wrap;
    c.nec_credits = p.nec.credits;
    c.count = p.count;
    c.chunk_bytes = p.chunk_bytes;
    c.direct_threshold_bytes = p.direct_threshold_bytes;
    c
}

fn create(p: &PlanParams) -> Result<*mut NrtProxyPlan, NRT_STATUS> {
    let c = c_params(p);
    let mut plan = ptr::null_mut();
    // SAFETY: valid params and out-parameter.
    match unsafe { nrt_proxy_plan_create(&c, &mut plan) } {
        NRT_SUCCESS => Ok(plan),
        s => {
            assert!(plan.is_null());
            Err(s)
        }
    }
}

const fn buf(b: Buf) -> u32 {
    match b {
        Buf::Input => NRT_PROXY_BUF_INPUT,
        Buf::Output => NRT_PROXY_BUF_OUTPUT,
        Buf::Scratch => NRT_PROXY_BUF_SCRATCH,
    }
}

/// Every part's FIFOs, program and sizes through C equal the planner's.
fn check_same(p: &PlanParams) {
    let want = plan_blocks(p).expect("the planner plans it");
    let plan = create(p).expect("nrt_proxy_plan_create");
    let mut layout = NrtProxyPlanLayout {
        struct_size: size_of::<NrtProxyPlanLayout>() as u32,
        ..Default::default()
    };
    // SAFETY: valid plan and out-parameter (all calls below likewise).
    let s = unsafe { nrt_proxy_plan_layout(plan, &mut layout) };
    assert_eq!(s, NRT_SUCCESS);
    assert_eq!(layout.n_blocks as usize, want.blocks.len());
    assert_eq!(layout.host_words, want.host_words());
    assert_eq!(
        (
            layout.input_bytes,
            layout.output_bytes,
            layout.scratch_bytes
        ),
        (
            want.layout.input_bytes,
            want.layout.output_bytes,
            want.layout.scratch_bytes
        )
    );
    assert_eq!(
        (layout.input_offset, layout.output_offset, layout.in_place),
        (
            want.layout.input_offset,
            want.layout.output_offset,
            u32::from(want.layout.in_place)
        )
    );
    let algo = Algorithm::ALL
        .iter()
        .position(|&x| x == want.params.algorithm)
        .unwrap() as u32;
    assert_eq!(layout.algorithm, algo, "{p:?}");
    let mut infos = vec![NrtProxyPlanBlockInfo::default(); want.blocks.len()];
    let mut n = 0usize;
    // SAFETY: as above.
    let s = unsafe { nrt_proxy_plan_blocks(plan, infos.as_mut_ptr(), infos.len(), &mut n) };
    assert_eq!((s, n), (NRT_SUCCESS, want.blocks.len()));
    let mut sched = vec![0u32; 2 * p.blocks as usize];
    // SAFETY: as above.
    let s = unsafe { nrt_proxy_plan_schedule(plan, 2, sched.as_mut_ptr(), sched.len(), &mut n) };
    assert_eq!(s, NRT_SUCCESS);
    assert_eq!(sched[..n], want.schedule(2)[..]);
    let addrs = Addresses {
        input: 0x1000_0000,
        output: 0x2000_0000,
        scratch: 0x3000_0000,
        words: 0x4000_0000,
        word_stride: 64,
    };
    let c_addrs = NrtProxyPlanAddresses {
        input: addrs.input,
        output: addrs.output,
        scratch: addrs.scratch,
        words: addrs.words,
        word_stride: addrs.word_stride,
    };
    for (i, (info, b)) in infos.iter().zip(&want.blocks).enumerate() {
        assert_eq!((info.stream, info.bb), (b.stream, b.block));
        assert_eq!((info.elem_lo, info.elem_hi), b.elems);
        assert_eq!(info.word_base, b.word_base);
        assert_eq!(info.host_words, b.plan.host_words());
        let f = b.fifos(&addrs);
        let mut ops = vec![f.ops[0]; info.n_ops as usize];
        let mut src = vec![NetSrcAddr::default(); info.n_src as usize];
        let mut dst = vec![NetDestAddr::default(); info.n_dst as usize];
        let mut blk = std::mem::MaybeUninit::<NrtProxyBlock>::uninit();
        // SAFETY: as above; arrays of the sizes passed.
        let s = unsafe {
            nrt_proxy_plan_fifos(
                plan,
                i as u32,
                &c_addrs,
                ops.as_mut_ptr(),
                ops.len(),
                src.as_mut_ptr(),
                src.len(),
                dst.as_mut_ptr(),
                dst.len(),
                blk.as_mut_ptr(),
            )
        };
        assert_eq!(s, NRT_SUCCESS);
        // SAFETY: written on success.
        let blk = unsafe { blk.assume_init() };
        assert_eq!((ops, src, dst), (f.ops, f.src, f.dst), "{p:?} part {i}");
        assert_eq!((blk.stream, blk.bb), (b.stream, b.block));
        assert_eq!(
            (blk.n_ops, blk.n_src, blk.n_dst),
            (
                info.n_ops as usize,
                info.n_src as usize,
                info.n_dst as usize
            )
        );
        let mut prog = vec![NrtProxyPlanInstr::default(); info.n_instrs as usize];
        // SAFETY: as above.
        let s = unsafe {
            nrt_proxy_plan_program(plan, i as u32, prog.as_mut_ptr(), prog.len(), &mut n)
        };
        assert_eq!((s, n), (NRT_SUCCESS, b.plan.program.len()));
        for (c, w) in prog.iter().zip(&b.plan.program) {
            let side = |s: Side| s as u32;
            let ok = match *w {
                Instr::Arm { op, side: s } => {
                    c.kind == NRT_PROXY_INSTR_ARM && c.op == op && c.side == side(s)
                }
                Instr::WaitHandshake { op, side: s } => {
                    c.kind == NRT_PROXY_INSTR_WAIT_HANDSHAKE && c.op == op && c.side == side(s)
                }
                Instr::Post { op, side: s, upto } => {
                    c.kind == NRT_PROXY_INSTR_POST && (c.op, c.side, c.upto) == (op, side(s), upto)
                }
                Instr::Wait { op, side: s, upto } => {
                    c.kind == NRT_PROXY_INSTR_WAIT && (c.op, c.side, c.upto) == (op, side(s), upto)
                }
                Instr::Reduce { dst, a, b, elems } => {
                    c.kind == NRT_PROXY_INSTR_REDUCE
                        && (c.dst_buf, c.dst_offset) == (buf(dst.buf), dst.offset)
                        && (c.a_buf, c.a_offset) == (buf(a.buf), a.offset)
                        && (c.b_buf, c.b_offset) == (buf(b.buf), b.offset)
                        && c.count == elems
                }
                Instr::Copy { dst, src, bytes } => {
                    c.kind == NRT_PROXY_INSTR_COPY
                        && (c.dst_buf, c.dst_offset) == (buf(dst.buf), dst.offset)
                        && (c.a_buf, c.a_offset) == (buf(src.buf), src.offset)
                        && c.count == bytes
                }
            };
            assert!(ok, "{p:?} part {i}: {c:?} is not {w:?}");
        }
    }
    // SAFETY: a live plan.
    assert_eq!(unsafe { nrt_proxy_plan_destroy(plan) }, NRT_SUCCESS);
}

#[test]
fn c_plans_are_the_planners_plans() {
    let before = live_plans();
    let mut cases = 0;
    for c in Collective::ALL {
        for algo in [Algorithm::Ring, Algorithm::Direct, Algorithm::Auto] {
            for (streams, blocks, in_place) in [(1, 1, false), (2, 3, true), (4, 1, false)] {
                let mut p = PlanParams::new(c, 3000, DataType::F32, 2, 3);
                p.algorithm = algo;
                p.chunk_bytes = 1024;
                p.streams = streams;
                p.blocks = blocks;
                p.in_place = in_place;
                p.op = RedOp::Max;
                p.root = 1;
                p.nec = NecOptions {
                    early_recv: 2,
                    early_send: in_place,
                    idx_wrap: if in_place { 4 } else { 0 },
                    credits: 8,
                };
                check_same(&p);
                cases += 1;
            }
        }
    }
    let mut p = PlanParams::new(Collective::AllReduce, 1000, DataType::Bf16, 0, 2);
    p.direct_threshold_bytes = 1 << 20; // auto picks direct below it
    check_same(&p);
    assert_eq!(cases, 54);
    assert_eq!(live_plans(), before, "every plan destroyed");
}

#[test]
fn plans_beyond_the_fifo_limits_are_refused() {
    // One element per entry: more than 65536 entries on an op side.
    let mut p = PlanParams::new(Collective::SendRecv, 70_000, DataType::U8, 0, 2);
    p.chunk_bytes = 1;
    assert_eq!(create(&p).err(), Some(NRT_INVALID));
    // Refused before planning (the planner would build 2^32 entries first): a huge count in
    // one-byte chunks.
    let mut p = PlanParams::new(Collective::SendRecv, 1 << 32, DataType::U8, 0, 2);
    p.chunk_bytes = 1;
    assert_eq!(create(&p).err(), Some(NRT_INVALID));
    // Exactly at the FIFO limit: 65536 one-byte entries on each side, planned.
    let mut p = PlanParams::new(Collective::SendRecv, 1 << 16, DataType::U8, 1, 2);
    p.chunk_bytes = 1;
    let plan = create(&p).expect("65536 entries per op side fit");
    // SAFETY: a live plan.
    assert_eq!(unsafe { nrt_proxy_plan_destroy(plan) }, NRT_SUCCESS);
    // Too many (stream, block) tag ranges for the ranks: 16 parts × 2(n − 1) tags > 2^14.
    let mut p = PlanParams::new(Collective::AllReduce, 600 * 16, DataType::F32, 0, 600);
    p.algorithm = Algorithm::Ring;
    p.chunk_bytes = 4;
    p.streams = 4;
    p.blocks = 4;
    assert_eq!(create(&p).err(), Some(NRT_INVALID));
}
