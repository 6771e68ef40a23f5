use super::*;

/// `all[v] == want` for every `(v, want)`, and every entry of `all` named once.
fn indexes<T: PartialEq + core::fmt::Debug>(all: &[T], pairs: &[(u32, T)]) {
    assert_eq!(pairs.len(), all.len());
    for (v, want) in pairs {
        assert_eq!(&all[*v as usize], want);
    }
}

/// The C constants index the planner's lists (what [`pick`] relies on).
#[test]
fn c_constants_are_the_planner_list_indices() {
    use Collective as C;
    indexes(
        &Collective::ALL,
        &[
            (NRT_PROXY_COLL_ALL_REDUCE, C::AllReduce),
            (NRT_PROXY_COLL_ALL_GATHER, C::AllGather),
            (NRT_PROXY_COLL_REDUCE_SCATTER, C::ReduceScatter),
            (NRT_PROXY_COLL_BROADCAST, C::Broadcast),
            (NRT_PROXY_COLL_SEND_RECV, C::SendRecv),
            (NRT_PROXY_COLL_ALL_TO_ALL, C::AllToAll),
        ],
    );
    use DataType as D;
    indexes(
        &DataType::ALL,
        &[
            (NRT_PROXY_DTYPE_F32, D::F32),
            (NRT_PROXY_DTYPE_F64, D::F64),
            (NRT_PROXY_DTYPE_F16, D::F16),
            (NRT_PROXY_DTYPE_BF16, D::Bf16),
            (NRT_PROXY_DTYPE_I32, D::I32),
            (NRT_PROXY_DTYPE_U8, D::U8),
        ],
    );
    use RedOp as R;
    indexes(
        &RedOp::ALL,
        &[
            (NRT_PROXY_REDOP_SUM, R::Sum),
            (NRT_PROXY_REDOP_PROD, R::Prod),
            (NRT_PROXY_REDOP_MIN, R::Min),
            (NRT_PROXY_REDOP_MAX, R::Max),
        ],
    );
    use proxy_collectives::planner::Algorithm as A;
    indexes(
        &ALGORITHMS,
        &[
            (NRT_PROXY_ALGO_AUTO, A::Auto),
            (NRT_PROXY_ALGO_RING, A::Ring),
            (NRT_PROXY_ALGO_DIRECT, A::Direct),
            (NRT_PROXY_ALGO_RECURSIVE_DOUBLING, A::RecursiveDoubling),
            (NRT_PROXY_ALGO_RABENSEIFNER, A::Rabenseifner),
            (NRT_PROXY_ALGO_RECURSIVE_HALVING, A::RecursiveHalving),
            (NRT_PROXY_ALGO_BRUCK, A::Bruck),
            (NRT_PROXY_ALGO_BINOMIAL, A::Binomial),
            (NRT_PROXY_ALGO_SCATTER_ALLGATHER, A::ScatterAllgather),
            (NRT_PROXY_ALGO_HIERARCHICAL, A::Hierarchical),
        ],
    );
}
