use super::*;

fn all_frames() -> Vec<Frame> {
    vec![
        Frame::Hello {
            rank: 3,
            nranks: 4,
            pid: 77,
            host: b"host".to_vec(),
        },
        Frame::Welcome {
            comm_id: 0x7FFF,
            hosts: vec![b"a".to_vec(), vec![], b"ccc".to_vec()],
        },
        Frame::Reject {
            status: 2,
            reason: "no".into(),
        },
        Frame::Abort {
            origin: 1,
            status: 5,
            reason: "timeout".into(),
        },
        Frame::Gather {
            seq: 9,
            blob: vec![1, 2, 3],
        },
        Frame::Gathered {
            seq: 9,
            blobs: vec![vec![], vec![0; 100]],
        },
        Frame::Arrive { gen: u32::MAX },
        Frame::Release { gen: 0 },
        Frame::Bye,
        Frame::GroupArrive { group: 3, gen: 7 },
        Frame::GroupRelease {
            group: 0,
            gen: u32::MAX,
        },
        Frame::Lost {
            rank: 5,
            reason: "closed without Bye".into(),
        },
    ]
}

#[test]
fn every_frame_round_trips_whole_and_byte_by_byte() {
    let mut buf = Vec::new();
    for f in all_frames() {
        f.encode(&mut buf);
    }
    let mut rest = &buf[..];
    for want in all_frames() {
        // Every strict prefix of the frame is "not yet".
        let (_, used) = Frame::decode(rest).unwrap().unwrap();
        for cut in 0..used {
            assert_eq!(Frame::decode(&rest[..cut]), Ok(None), "{want:?} cut {cut}");
        }
        let (got, used) = Frame::decode(rest).unwrap().unwrap();
        assert_eq!(got, want);
        rest = &rest[used..];
    }
    assert!(rest.is_empty());
}

#[test]
fn bad_frames_are_errors() {
    assert!(Frame::decode(&[0, 0, 0, 0]).is_err());
    assert!(Frame::decode(&(MAX_FRAME + 1).to_le_bytes()).is_err());
    assert!(Frame::decode(&[1, 0, 0, 0, 200]).is_err());
    // Arrive with a short payload, and with trailing bytes.
    assert!(Frame::decode(&[3, 0, 0, 0, T_ARRIVE, 1, 2]).is_err());
    assert!(Frame::decode(&[6, 0, 0, 0, T_ARRIVE, 1, 2, 3, 4, 5]).is_err());
    // A list claiming more items than its bytes can hold.
    let mut b = vec![9, 0, 0, 0, T_WELCOME, 0, 0, 0, 0];
    b.extend_from_slice(&1000u32.to_le_bytes());
    b[0] = (b.len() - 4) as u8;
    assert!(Frame::decode(&b).is_err());
}

#[test]
fn preface_checks() {
    let p = preface();
    assert_eq!(read_preface(&p), Preface::Version(VERSION));
    assert_eq!(read_preface(&p[..3]), Preface::Incomplete);
    assert_eq!(read_preface(&[]), Preface::Incomplete);
    assert_eq!(read_preface(b"GET / HTTP/1.0"), Preface::WrongMagic);
    assert_eq!(read_preface(b"PX"), Preface::Incomplete);
    assert_eq!(read_preface(b"PY"), Preface::WrongMagic);
    let mut v2 = p;
    v2[4] = 3;
    assert_eq!(read_preface(&v2), Preface::Version(3));
}
