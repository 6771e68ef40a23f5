//! A plan made concrete for a test: its memory regions from its layout, and every block's
//! FIFOs and descriptor (what a runtime does before it submits a network task).

use nrt_proxy::*;
use proxy_abi::*;

/// A plan's layout (`nrt_proxy_plan_layout`); panics with the status when the call fails.
pub fn layout(plan: *mut NrtProxyPlan) -> NrtProxyPlanLayout {
    let mut l = NrtProxyPlanLayout {
        struct_size: size_of::<NrtProxyPlanLayout>() as u32,
        ..NrtProxyPlanLayout::default()
    };
    // SAFETY: `l` is a valid, sized layout struct; the plan handle is the library's to check.
    let s = unsafe { nrt_proxy_plan_layout(plan, &mut l) };
    assert_eq!(s, NRT_SUCCESS, "nrt_proxy_plan_layout");
    l
}

/// The four regions a plan's layout asks for (input, output, scratch, host words of 4 bytes),
/// zeroed, and their addresses. The regions are heap buffers: moving this value moves no byte
/// the addresses name.
pub struct PlanMemory {
    pub mem: [Vec<u64>; 4],
    pub addrs: NrtProxyPlanAddresses,
}

impl PlanMemory {
    pub fn new(l: &NrtProxyPlanLayout) -> Self {
        let words = |bytes: u64| vec![0u64; (bytes as usize).div_ceil(8).max(1)];
        let mut mem = [
            words(l.input_bytes),
            words(l.output_bytes),
            words(l.scratch_bytes),
            words(u64::from(l.host_words) * 4),
        ];
        let addrs = NrtProxyPlanAddresses {
            input: mem[0].as_mut_ptr() as u64,
            output: mem[1].as_mut_ptr() as u64,
            scratch: mem[2].as_mut_ptr() as u64,
            words: mem[3].as_mut_ptr() as u64,
            word_stride: 4,
        };
        Self { mem, addrs }
    }
}

/// One block's FIFOs: ops, send entries, receive entries.
pub type Fifos = (Vec<NetOpInfo>, Vec<NetSrcAddr>, Vec<NetDestAddr>);

/// Every block of a plan materialized at some addresses (`nrt_proxy_plan_blocks`, then
/// `nrt_proxy_plan_fifos` per block): the descriptors, and the FIFOs they point into, kept
/// alive here (heap buffers: moving this value keeps the pointers valid).
pub struct PlanBlocks {
    pub fifos: Vec<Fifos>,
    pub blocks: Vec<NrtProxyBlock>,
}

impl PlanBlocks {
    /// Panics with the failing call when the library refuses one.
    pub fn new(
        plan: *mut NrtProxyPlan,
        l: &NrtProxyPlanLayout,
        addrs: &NrtProxyPlanAddresses,
    ) -> Self {
        let mut infos = vec![NrtProxyPlanBlockInfo::default(); l.n_blocks as usize];
        let mut n = 0;
        // SAFETY: `infos` holds `infos.len()` entries and `n` is a valid out pointer.
        let s = unsafe { nrt_proxy_plan_blocks(plan, infos.as_mut_ptr(), infos.len(), &mut n) };
        assert_eq!(s, NRT_SUCCESS, "nrt_proxy_plan_blocks");
        let mut fifos: Vec<Fifos> = infos
            .iter()
            .map(|i| {
                (
                    vec![NetOpInfo::default(); i.n_ops as usize],
                    vec![NetSrcAddr::default(); i.n_src as usize],
                    vec![NetDestAddr::default(); i.n_dst as usize],
                )
            })
            .collect();
        let mut blocks = Vec::new();
        for (i, (o, s, d)) in fifos.iter_mut().enumerate() {
            // SAFETY: all-zero is a valid block (NULL arrays), overwritten by the call.
            let mut b: NrtProxyBlock = unsafe { std::mem::zeroed() };
            // SAFETY: each array holds the length passed with it; `addrs` and `b` are valid.
            let st = unsafe {
                nrt_proxy_plan_fifos(
                    plan,
                    i as u32,
                    addrs,
                    o.as_mut_ptr(),
                    o.len(),
                    s.as_mut_ptr(),
                    s.len(),
                    d.as_mut_ptr(),
                    d.len(),
                    &mut b,
                )
            };
            assert_eq!(st, NRT_SUCCESS, "nrt_proxy_plan_fifos block {i}");
            blocks.push(b);
        }
        Self { fifos, blocks }
    }
}
