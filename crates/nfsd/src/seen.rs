//! What the operations of one NFSv4 COMPOUND that change nothing have read of an
//! object, for the next such operation on the same object in the same COMPOUND.
//!
//! The Linux client sends its metadata operations in COMPOUNDs that look at one
//! object several times: LOOKUP, GETFH, GETATTR (a `stat`), ACCESS then GETATTR (an
//! `open` or a revalidation), OPEN, GETFH, ACCESS, GETATTR. Each operation resolves
//! its filehandle on its own, and every resolve reads the object's attributes again
//! (`statx`; for a file not open, `open_by_handle_at` and `close` too): the same
//! answer, read twice or three times within a few microseconds, where nothing in
//! between could have changed it. knfsd answers such a COMPOUND from the inode it
//! looked up once.
//!
//! So a [`crate::nfs::Caller`] keeps the last object it resolved or looked up while
//! operations flagged [`crate::v4`]'s `READS_ONLY` run (they change no object: no
//! data, attribute, name or access time), and the next of them on the same handle
//! takes it from here. Any other operation clears it before it runs
//! ([`Seen::allow`]), so an operation of this COMPOUND that changes something is
//! always followed by fresh reads; NFSv3 never turns it on. A change by another
//! client between two operations of one COMPOUND may then be missed by the second:
//! as if it had come after the COMPOUND. A COMPOUND is not isolated from other
//! requests (knfsd interleaves them too), so a client cannot tell the two apart.

use std::sync::{Arc, Mutex, MutexGuard};

use nfs3::NfsFh3;

use crate::vfs::{Export, Meta, Node};

/// One COMPOUND's last look at an object (module docs). Starts off; a clone starts
/// empty and off, as [`crate::vfs::RecentFile`] does.
#[derive(Debug, Default)]
pub struct Seen(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    mode: Mode,
    last: Option<(NfsFh3, Arc<Export>, Object)>,
    /// Rights of the object in `last` the kernel was asked about for this
    /// COMPOUND's caller (whose identity is the same for all its operations), and
    /// those of them it granted ([`Seen::keep_rights`]). Forgotten with `last`.
    rights: Option<Rights>,
}

/// Rights checked (`faccessat2` as the caller) and those granted among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    /// Rights the kernel was asked about.
    pub checked: rustix::fs::Access,
    /// Those it granted.
    pub granted: rustix::fs::Access,
}

/// What the running operation is ([`Seen::allow`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No COMPOUND's (NFSv3, NLM): nothing is kept or given.
    #[default]
    Off,
    /// One that may change something: nothing is given; only its own last look is
    /// kept ([`Seen::keep_after_change`]), for the operations after it.
    Changing,
    /// One that changes nothing: what it reads is kept, and given.
    ReadsOnly,
}

/// What was read of the object.
#[derive(Debug)]
enum Object {
    /// Resolved: opened as an O_PATH descriptor, with its attributes.
    Node(Node),
    /// Looked up by name (LOOKUP): its attributes, not opened.
    Meta(Meta),
}

impl Seen {
    fn state(&self) -> MutexGuard<'_, State> {
        // Poisoned only by a panic while held: the state is a plain value.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before each operation of a COMPOUND: `reads_only` says whether it changes
    /// nothing. If it may change something, what was seen is forgotten first, and
    /// nothing is given while it runs (it keeps only its own last look,
    /// [`Seen::keep_after_change`]).
    pub fn allow(&self, reads_only: bool) {
        let mut s = self.state();
        if reads_only {
            s.mode = Mode::ReadsOnly;
        } else {
            s.mode = Mode::Changing;
            s.last = None;
            s.rights = None;
        }
    }

    /// Records that the kernel, asked as this COMPOUND's caller about the `checked`
    /// rights on the object `fh` names, granted `granted`: for an ACCESS of it later
    /// in the COMPOUND while nothing changes (OPEN checks what the ACCESS after it
    /// asks, `crate::v4::open_ops`). Kept only while `fh` is the object last seen.
    pub fn keep_rights(&self, fh: &NfsFh3, rights: Rights) {
        let mut s = self.state();
        if s.mode != Mode::Off && matches!(&s.last, Some((f, ..)) if f == fh) {
            s.rights = Some(rights);
        }
    }

    /// What [`Seen::keep_rights`] recorded of the object `fh` names, while an
    /// operation that changes nothing runs.
    pub fn rights(&self, fh: &NfsFh3) -> Option<Rights> {
        let s = self.state();
        match &s.last {
            Some((f, ..)) if s.mode == Mode::ReadsOnly && f == fh => s.rights,
            _ => None,
        }
    }

    /// The object `fh` names, as resolved by an earlier operation that changed
    /// nothing, since which nothing could have changed it.
    pub fn node(&self, fh: &NfsFh3) -> Option<(Arc<Export>, Node)> {
        let s = self.state();
        match &s.last {
            Some((f, ex, Object::Node(n))) if s.mode == Mode::ReadsOnly && f == fh => {
                Some((ex.clone(), n.clone()))
            }
            _ => None,
        }
    }

    /// The attributes of the object `fh` names, as an earlier operation that
    /// changed nothing read them (resolved or looked up).
    pub fn meta(&self, fh: &NfsFh3) -> Option<(Arc<Export>, Meta)> {
        let s = self.state();
        match &s.last {
            Some((f, ex, o)) if s.mode == Mode::ReadsOnly && f == fh => Some((
                ex.clone(),
                match o {
                    Object::Node(n) => n.meta,
                    Object::Meta(m) => *m,
                },
            )),
            _ => None,
        }
    }

    /// Keeps `node`, just resolved for `fh` in `ex`, while an operation that
    /// changes nothing runs.
    pub fn keep_node(&self, fh: &NfsFh3, ex: &Arc<Export>, node: &Node) {
        self.keep(fh, ex, || Object::Node(node.clone()));
    }

    /// Keeps `meta`, just looked up for `fh` in `ex` (LOOKUP), as
    /// [`Seen::keep_node`].
    pub fn keep_meta(&self, fh: &NfsFh3, ex: &Arc<Export>, meta: Meta) {
        self.keep(fh, ex, || Object::Meta(meta));
    }

    /// Keeps `node`, whose attributes an operation that changed the object `fh`
    /// names has just read as its last step (a directory's `wcc_data` after a
    /// REMOVE): what the next operation that changes nothing would read too.
    pub fn keep_after_change(&self, fh: &NfsFh3, ex: &Arc<Export>, node: impl FnOnce() -> Node) {
        let mut s = self.state();
        if s.mode != Mode::Off {
            s.last = Some((fh.clone(), ex.clone(), Object::Node(node())));
            s.rights = None;
        }
    }

    fn keep(&self, fh: &NfsFh3, ex: &Arc<Export>, object: impl FnOnce() -> Object) {
        let mut s = self.state();
        if s.mode == Mode::ReadsOnly {
            s.last = Some((fh.clone(), ex.clone(), object()));
            s.rights = None;
        }
    }
}

impl Clone for Seen {
    fn clone(&self) -> Self {
        Seen::default()
    }
}
