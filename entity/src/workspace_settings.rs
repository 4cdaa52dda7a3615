//! The client-API settings of one workspace and mode; secrets are sealed in their own columns.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "workspace_settings")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub workspace_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub test_mode: bool,
    /// JSON object of snake_case sections, without `webhooks.signing_key` and
    /// `encryption.passphrase`.
    pub document: String,
    /// The SMSGate webhook signing key, sealed; None: generated when first needed.
    pub signing_key: Option<String>,
    /// `encryption.passphrase`, sealed; None: not set.
    pub passphrase: Option<String>,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
