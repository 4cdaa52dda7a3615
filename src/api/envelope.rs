//! The success envelope as an OpenAPI schema for the routes whose `data` is a typed `…Out`
//! struct: `envelope_of!(WorkspaceEnvelope, WorkspaceOut, "doc")` declares
//! `{status: "success", message, data: WorkspaceOut}` (the wire shape `error::success` writes).

/// Declares a success envelope schema around a `data` type.
macro_rules! envelope_of {
    ($name:ident, $data:ty, $doc:literal) => {
        #[doc = $doc]
        #[derive(serde::Serialize, utoipa::ToSchema)]
        pub struct $name {
            /// Always `success`.
            #[schema(pattern = "^success$")]
            pub status: String,
            /// A human-readable summary.
            pub message: String,
            pub data: $data,
        }
    };
}

pub(crate) use envelope_of;
