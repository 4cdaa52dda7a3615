//! A partial index of the outbound messages still `queued`, by workspace and mode: the
//! queued-messages quota counts them (bounded by the quota) with an index-only scan, and the
//! index holds only the queued rows, not the day's whole history (docs/api.md, "Quotas").

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The same statement on SQLite and PostgreSQL; sea-query's index builder has no WHERE.
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX idx_messages_queued ON messages (workspace_id, test_mode) \
                 WHERE status = 'queued' AND direction = 'outbound'",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .get_connection()
            .execute_unprepared("DROP INDEX idx_messages_queued")
            .await?;
        Ok(())
    }
}
