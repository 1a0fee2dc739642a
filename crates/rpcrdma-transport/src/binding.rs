//! What the transport needs from an Upper Layer Binding
//! (rpcrdma-v1-draft-ietf-nfsv4-rfc5666bis-04 §8).
//!
//! Everything is in the core's [`rpcrdma::ulb::UpperLayerBinding`]: the reply sizes, the
//! DDP-eligible arguments, and where DDP-eligible results go back into a Reply
//! ([`UpperLayerBinding::reply_ddp_offsets`], with [`rpcrdma::rpc::results_offset`] for
//! the start of the results). [`RdmaBinding`] only adds what sharing one binding between
//! connection tasks needs, so an upper layer depends on the protocol core alone.

use rpcrdma::ulb::UpperLayerBinding;

/// An Upper Layer Binding usable by the transport (as `Arc<dyn RdmaBinding>`): any
/// [`UpperLayerBinding`] that can be shared between tasks.
pub trait RdmaBinding: UpperLayerBinding + Send + Sync + 'static {}

impl<T: UpperLayerBinding + Send + Sync + 'static> RdmaBinding for T {}
