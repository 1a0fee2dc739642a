//! Open enums for wire values (rustls `enum_builder!`): a newtype over the `u32` on the
//! wire, with named constants. An unknown value decodes and survives, so the layer that
//! knows the spec can give the spec's answer to it (PROG_UNAVAIL, AUTH_REJECTEDCRED, ...).

/// Declares an open enum over `u32` with named constants, XDR `Encode`/`Decode`
/// and a `Debug` that prints the constant's name.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$cmeta:meta])* $cname:ident = $value:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name(pub u32);

        impl $name {
            $( $(#[$cmeta])* pub const $cname: $name = $name($value); )*

            /// The spec's name of this value, if it has one.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $value => Some(stringify!($cname)), )*
                    _ => None,
                }
            }

            /// Whether the value is one the spec defines.
            pub fn is_known(self) -> bool {
                self.name().is_some()
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

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Debug::fmt(self, f)
            }
        }

        impl From<u32> for $name {
            fn from(v: u32) -> Self {
                $name(v)
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }

        impl xdr::Encode for $name {
            fn encode(&self, enc: &mut xdr::Encoder) {
                enc.u32(self.0);
            }
        }

        impl xdr::Decode for $name {
            fn decode(dec: &mut xdr::Decoder) -> xdr::Result<Self> {
                dec.u32().map($name)
            }
        }
    };
}

pub(crate) use wire_enum;
