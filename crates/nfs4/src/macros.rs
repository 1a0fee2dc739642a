//! Declarative helpers that write the XDR codecs of structs and open enums.
//!
//! The same two macros as `nfs3`'s `src/macros.rs`, copied: they are crate-private
//! there, and sharing them (exporting them from `xdr`) would mean editing two other
//! crates for ~70 lines. If a third crate needs them, move them into `xdr` then.

/// A struct whose XDR encoding is its fields in order (RFC 4506 §4.14).
macro_rules! xdr_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $f:ident : $t:ty ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $t ),*
        }

        impl xdr::Encode for $name {
            #[allow(unused_variables)]
            fn encode(&self, enc: &mut xdr::Encoder) {
                $( xdr::Encode::encode(&self.$f, enc); )*
            }
        }

        impl xdr::Decode for $name {
            #[allow(unused_variables)]
            fn decode(dec: &mut xdr::Decoder) -> xdr::Result<Self> {
                Ok(Self { $( $f: xdr::Decode::decode(dec)? ),* })
            }
        }
    };
}

/// An open enumeration (RFC 4506 §4.3): a newtype over `u32` with named constants, so
/// that unknown values survive decoding (rustls `enum_builder!`).
macro_rules! open_enum {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$cm:meta])* $c:ident = $v:expr ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            $( $(#[$cm])* pub const $c: Self = Self($v); )*

            /// The constant's name as the RFC writes it, or `None` for an unknown value.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $( Self::$c => Some(stringify!($c)), )*
                    _ => None,
                }
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }

        impl xdr::Encode for $name {
            fn encode(&self, enc: &mut xdr::Encoder) {
                enc.u32(self.0);
            }
        }

        impl xdr::Decode for $name {
            fn decode(dec: &mut xdr::Decoder) -> xdr::Result<Self> {
                dec.u32().map(Self)
            }
        }
    };
}
