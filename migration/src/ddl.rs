//! The index, column and table statements the migrations share, written once so each migration
//! reads as the list of what it creates or drops.
//!
//! Each helper issues exactly the statements the migrations issued by hand before (same names,
//! column order and options), so the schema they produce is unchanged.

use sea_orm_migration::prelude::*;

/// An index `name` on `table` over `columns`, in order, for [`SchemaManager::create_index`]
/// (`.and_where(…)` makes it partial).
pub(crate) fn index<C: IntoIndexColumn>(
    name: &str,
    table: impl IntoIden,
    columns: impl IntoIterator<Item = C>,
) -> IndexCreateStatement {
    let mut index = Index::create();
    index.name(name).table(table.into_iden());
    for column in columns {
        index.col(column);
    }
    index
}

/// A unique index `name` on `table` over `columns`, in order: the database, not a
/// check-then-insert, keeps the rows it covers distinct.
pub(crate) fn unique_index<C: IntoIndexColumn>(
    name: &str,
    table: impl IntoIden,
    columns: impl IntoIterator<Item = C>,
) -> IndexCreateStatement {
    index(name, table, columns).unique().to_owned()
}

/// Drops the index `name` of `table`.
pub(crate) async fn drop_index(
    manager: &SchemaManager<'_>,
    name: &str,
    table: impl IntoIden,
) -> Result<(), DbErr> {
    manager
        .drop_index(Index::drop().name(name).table(table.into_iden()).to_owned())
        .await
}

/// Drops `tables`, in order (dependents first).
pub(crate) async fn drop_tables(
    manager: &SchemaManager<'_>,
    tables: impl IntoIterator<Item = DynIden>,
) -> Result<(), DbErr> {
    for table in tables {
        manager
            .drop_table(Table::drop().table(table).to_owned())
            .await?;
    }
    Ok(())
}

/// Adds `columns` to `table`, in order.
pub(crate) async fn add_columns(
    manager: &SchemaManager<'_>,
    table: impl IntoIden,
    columns: impl IntoIterator<Item = ColumnDef>,
) -> Result<(), DbErr> {
    alter_column_by_column(manager, table, columns, |alter, column| {
        alter.add_column(column);
    })
    .await
}

/// Drops `columns` of `table`, in order.
pub(crate) async fn drop_columns<C: IntoIden>(
    manager: &SchemaManager<'_>,
    table: impl IntoIden,
    columns: impl IntoIterator<Item = C>,
) -> Result<(), DbErr> {
    alter_column_by_column(manager, table, columns, |alter, column| {
        alter.drop_column(column);
    })
    .await
}

/// One `ALTER TABLE` of `table` per column, `change` saying what it does to the column: SQLite
/// alters one column per statement.
async fn alter_column_by_column<C>(
    manager: &SchemaManager<'_>,
    table: impl IntoIden,
    columns: impl IntoIterator<Item = C>,
    change: impl Fn(&mut TableAlterStatement, C),
) -> Result<(), DbErr> {
    let table = table.into_iden();
    for column in columns {
        let mut alter = Table::alter();
        alter.table(table.clone());
        change(&mut alter, column);
        manager.alter_table(alter).await?;
    }
    Ok(())
}
