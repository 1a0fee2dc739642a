//! Declarative helpers that write the XDR codecs of structs and open enums, for the
//! crates of wire types above this one (`nfs3`, `nfs4`): one definition, exported.
//! Use them with `#[macro_use] extern crate xdr;` at the crate root.

/// A struct whose XDR encoding is its fields in order (RFC 4506 §4.14).
#[macro_export]
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

        impl $crate::Encode for $name {
            #[allow(unused_variables)]
            fn encode(&self, enc: &mut $crate::Encoder) {
                $( $crate::Encode::encode(&self.$f, enc); )*
            }
        }

        impl $crate::Decode for $name {
            #[allow(unused_variables)]
            fn decode(dec: &mut $crate::Decoder) -> $crate::Result<Self> {
                Ok(Self { $( $f: $crate::Decode::decode(dec)? ),* })
            }
        }
    };
}

/// An open enumeration (RFC 4506 §4.3): a newtype over `u32` with named constants, so
/// that unknown values survive decoding (rustls `enum_builder!`).
#[macro_export]
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

        impl $crate::Encode for $name {
            fn encode(&self, enc: &mut $crate::Encoder) {
                enc.u32(self.0);
            }
        }

        impl $crate::Decode for $name {
            fn decode(dec: &mut $crate::Decoder) -> $crate::Result<Self> {
                dec.u32().map(Self)
            }
        }
    };
}
