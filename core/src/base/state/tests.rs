use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Door {
    Open,
    Shut,
    Locked,
}

impl Machine for Door {
    const NAME: &'static str = "door";
    fn edge(from: Self, to: Self) -> Option<u8> {
        match (from, to) {
            (Door::Open, Door::Shut) => Some(1),
            (Door::Shut, Door::Open) => Some(2),
            (Door::Shut, Door::Locked) => Some(3),
            (Door::Locked, Door::Shut) => Some(4),
            _ => None,
        }
    }
}

#[test]
fn a_legal_edge_is_taken_and_numbered() {
    let mut d = Door::Open;
    assert_eq!(step(&mut d, Door::Shut, &"front"), Ok(1));
    assert_eq!(step(&mut d, Door::Locked, &"front"), Ok(3));
    assert_eq!(d, Door::Locked);
}

#[test]
#[cfg_attr(
    debug_assertions,
    should_panic(expected = "illegal door state edge Open=>Locked")
)]
fn an_illegal_edge_is_refused_and_the_state_kept() {
    let mut d = Door::Open;
    let r = step(&mut d, Door::Locked, &"front");
    // Release build: refused, not taken.
    assert_eq!(
        r,
        Err(IllegalEdge {
            from: Door::Open,
            to: Door::Locked
        })
    );
    assert_eq!(d, Door::Open);
}
