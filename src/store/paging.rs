//! Keyset paging shared by every cursor-paged list.

use sea_orm::sea_query::{Expr, ExprTrait, IntoCondition};
use sea_orm::{
    ColumnTrait, Condition, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    Select,
};

use super::StoreError;

/// One page of `select`, newest first by (`at`, `id`), strictly after `after`, each row as
/// the list's record `R` (or as the row itself); fetches `limit + 1` rows to learn whether
/// more follow. Every cursor-paged list pages this way.
pub async fn newest_first<E, R>(
    db: &DatabaseConnection,
    select: Select<E>,
    (at, id): (E::Column, E::Column),
    after: Option<super::messages::Position>,
    limit: u64,
) -> Result<(Vec<R>, bool), StoreError>
where
    E: EntityTrait,
    R: TryFrom<E::Model>,
    StoreError: From<R::Error>,
{
    let select = match after {
        Some(p) => select.filter(
            Condition::any().add(at.lt(p.created_at)).add(
                Expr::col(at)
                    .eq(p.created_at)
                    .and(Expr::col(id).lt(p.id))
                    .into_condition(),
            ),
        ),
        None => select,
    };
    let mut rows = select
        .order_by_desc(at)
        .order_by_desc(id)
        .limit(limit + 1)
        .all(db)
        .await?;
    let has_more = rows.len() as u64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((super::map_rows(rows)?, has_more))
}
