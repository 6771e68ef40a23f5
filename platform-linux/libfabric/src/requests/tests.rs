use super::*;

#[test]
fn ids_are_generational_and_contexts_map_back() {
    let mut r = Requests::default();
    let (i, ctx) = r.reserve(Kind::Send, 1, 8, 0x42, None);
    assert_eq!(r.index_of_context(ctx), None, "not in flight yet");
    let id = r.mark_posted(i);
    assert_eq!(r.index_of_context(ctx), Some(i));
    assert_eq!(r.in_flight(), 1);
    assert_eq!(r.release(id), None, "in flight: not releasable");
    r.complete(i, State::Done(8));
    assert_eq!(r.in_flight(), 0);
    assert_eq!(
        r.index_of_context(ctx),
        None,
        "completed: a second completion is ignored"
    );
    assert_eq!(r.release(id), Some(State::Done(8)));
    assert!(r.get(id).is_none(), "released id is dead");
    let (j, ctx2) = r.reserve(Kind::Recv, 0, 4, 0x43, None);
    assert_eq!((j, ctx2), (i, ctx), "slot and context reused");
    let id2 = r.mark_posted(j);
    assert_ne!(id, id2, "a reused slot gets a new id");
    assert!(r.get(id).is_none());
    assert_eq!(r.index_of_context(std::ptr::null_mut()), None);
}

/// A context of another slab (an earlier lease's stuck request on a pooled set) is foreign:
/// never mapped to a slot, recognised so that its completion is dropped.
#[test]
fn another_slabs_context_is_foreign() {
    let mut earlier = Requests::default();
    let (i, ctx) = earlier.reserve(Kind::Send, 1, 1 << 20, 0x42, None);
    earlier.mark_posted(i);
    let mut later = Requests::default();
    let (j, own) = later.reserve(Kind::Send, 1, 1 << 20, 0x42, None);
    later.mark_posted(j);
    assert_eq!((i, j), (0, 0), "the same slot number in both slabs");
    assert_eq!(later.index_of_context(ctx), None);
    assert!(later.is_foreign(ctx));
    assert!(!later.is_foreign(own));
    assert!(!earlier.is_foreign(ctx));
    assert!(!later.is_foreign(std::ptr::null_mut()));
}
