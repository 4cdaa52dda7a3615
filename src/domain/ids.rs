//! Ids as types of their own: a `MessageId` cannot be passed where a `PhoneId` is meant
//! (docs/architecture.md, Layers). Each wraps the UUID the database stores and reads, writes
//! and prints as that UUID.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

/// Defines an id newtype over [`Uuid`] (after svix's `create_id_type!`).
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// The UUID as stored.
            pub fn as_uuid(self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> $name {
                $name(id)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<$name, uuid::Error> {
                Uuid::parse_str(text).map($name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// A message's id.
    MessageId
);
id_type!(
    /// A paired phone's id (the API's `device_id`).
    PhoneId
);
id_type!(
    /// A workspace's id: the owner of every key, phone, message and setting.
    WorkspaceId
);
id_type!(
    /// A campaign's id.
    CampaignId
);
id_type!(
    /// A webhook endpoint's id.
    EndpointId
);
id_type!(
    /// A contact's id.
    ContactId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_prints_and_serializes_as_its_uuid() {
        let uuid = Uuid::now_v7();
        let id = PhoneId::from(uuid);
        assert_eq!(id.to_string(), uuid.to_string());
        assert_eq!(
            serde_json::to_value(id).ok(),
            serde_json::to_value(uuid).ok()
        );
        assert_eq!(MessageId::from(uuid).as_uuid(), uuid);
        assert_eq!(
            uuid.to_string().parse::<WorkspaceId>().ok(),
            Some(uuid.into())
        );
        assert!("not-a-uuid".parse::<WorkspaceId>().is_err());
        assert_eq!(CampaignId::from(uuid).to_string(), uuid.to_string());
        assert_eq!(ContactId::from(uuid).as_uuid(), uuid);
        assert_eq!(
            serde_json::to_value(EndpointId::from(uuid)).ok(),
            serde_json::to_value(uuid).ok()
        );
    }
}
