//! Delivery by line (docs/api.md, "Phone stats"): per phone (a SIM line is a phone) and UTC day,
//! the messages sent, delivered and failed (`phone_daily_stats`), the failures by reason
//! (`phone_daily_failures`) and a histogram of the times from hand-over to delivery in
//! log-spaced buckets (`phone_daily_delivery_times`), from which the median is read. Message
//! records live a day after they end, so the figures cannot come from them; every read is a
//! primary-key range of one phone.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, integer, string_len};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(PhoneDailyStats::Table)
                    .col(ColumnDef::new(PhoneDailyStats::PhoneId).uuid().not_null())
                    .col(integer(PhoneDailyStats::Day))
                    .col(big_integer(PhoneDailyStats::Sent).default(0))
                    .col(big_integer(PhoneDailyStats::Delivered).default(0))
                    .col(big_integer(PhoneDailyStats::Failed).default(0))
                    .primary_key(
                        Index::create()
                            .col(PhoneDailyStats::PhoneId)
                            .col(PhoneDailyStats::Day),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PhoneDailyFailures::Table)
                    .col(
                        ColumnDef::new(PhoneDailyFailures::PhoneId)
                            .uuid()
                            .not_null(),
                    )
                    .col(integer(PhoneDailyFailures::Day))
                    .col(string_len(PhoneDailyFailures::Reason, 100))
                    .col(big_integer(PhoneDailyFailures::Failed).default(0))
                    .primary_key(
                        Index::create()
                            .col(PhoneDailyFailures::PhoneId)
                            .col(PhoneDailyFailures::Day)
                            .col(PhoneDailyFailures::Reason),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PhoneDailyDeliveryTimes::Table)
                    .col(
                        ColumnDef::new(PhoneDailyDeliveryTimes::PhoneId)
                            .uuid()
                            .not_null(),
                    )
                    .col(integer(PhoneDailyDeliveryTimes::Day))
                    .col(integer(PhoneDailyDeliveryTimes::Bucket))
                    .col(big_integer(PhoneDailyDeliveryTimes::Delivered).default(0))
                    .primary_key(
                        Index::create()
                            .col(PhoneDailyDeliveryTimes::PhoneId)
                            .col(PhoneDailyDeliveryTimes::Day)
                            .col(PhoneDailyDeliveryTimes::Bucket),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            PhoneDailyDeliveryTimes::Table.into_iden(),
            PhoneDailyFailures::Table.into_iden(),
            PhoneDailyStats::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum PhoneDailyStats {
    Table,
    PhoneId,
    /// Days since 1970-01-01, UTC.
    Day,
    Sent,
    Delivered,
    Failed,
}

#[derive(DeriveIden)]
enum PhoneDailyFailures {
    Table,
    PhoneId,
    Day,
    /// `failure_reason`, cut to 100 characters.
    Reason,
    Failed,
}

#[derive(DeriveIden)]
enum PhoneDailyDeliveryTimes {
    Table,
    PhoneId,
    Day,
    /// `domain::delivery_time::bucket_of` of the time from hand-over to delivery.
    Bucket,
    Delivered,
}
