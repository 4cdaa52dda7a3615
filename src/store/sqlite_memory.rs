//! SQLite's own allocations go to mimalloc, and SQLite keeps no allocation statistics.
//!
//! Why: SQLite allocates for every page it reads into a statement's temporary b-trees
//! (`RETURNING`, `IN (…)` lists) and for every value sqlx copies out of a row. Through glibc's
//! malloc that cost the SQLite worker thread — the one thread every write waits for — a large
//! share of its time in the send scenario (`malloc_consolidate`, arena locks, and the global
//! mutex SQLite takes around each call to keep its statistics). See docs/performance.md,
//! "SQLite's allocator hooks".
//!
//! SQLite only accepts this before its first connection is opened; [`configure`] runs once, before
//! the first connection [`super::connect`] or [`super::connect_writer`] opens, and leaves SQLite's
//! defaults in place if it is too late.

use std::ffi::{c_int, c_void};
use std::sync::Once;

use libmimalloc_sys::{mi_free, mi_good_size, mi_malloc, mi_realloc, mi_usable_size};
use libsqlite3_sys::{
    SQLITE_CONFIG_MALLOC, SQLITE_CONFIG_MEMSTATUS, SQLITE_OK, sqlite3_config, sqlite3_mem_methods,
};

/// Points SQLite at mimalloc and turns its allocation statistics off (once per process).
pub fn configure() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let methods = sqlite3_mem_methods {
            xMalloc: Some(x_malloc),
            xFree: Some(x_free),
            xRealloc: Some(x_realloc),
            xSize: Some(x_size),
            xRoundup: Some(x_roundup),
            xInit: Some(x_init),
            xShutdown: Some(x_shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: both options are documented for use before sqlite3_initialize(); SQLite copies
        // the methods struct before returning, and answers SQLITE_MISUSE (changing nothing) when
        // it is already initialised.
        let (statistics, allocator) = unsafe {
            (
                sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0 as c_int),
                sqlite3_config(SQLITE_CONFIG_MALLOC, &methods as *const sqlite3_mem_methods),
            )
        };
        if statistics != SQLITE_OK || allocator != SQLITE_OK {
            tracing::warn!(
                statistics,
                allocator,
                "SQLite was initialised before its allocator could be set; it keeps the system's"
            );
        }
    });
}

/// SQLite asks for sizes as `int`; a negative size is never asked for, but is refused.
fn size(n: c_int) -> Option<usize> {
    usize::try_from(n).ok()
}

unsafe extern "C" fn x_malloc(n: c_int) -> *mut c_void {
    match size(n) {
        // SAFETY: mi_malloc accepts any size and returns memory aligned for any type (SQLite
        // needs 8 bytes), or null when out of memory, which SQLite handles.
        Some(n) => unsafe { mi_malloc(n) },
        None => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn x_free(p: *mut c_void) {
    // SAFETY: SQLite frees only what x_malloc / x_realloc returned.
    unsafe { mi_free(p) }
}

unsafe extern "C" fn x_realloc(p: *mut c_void, n: c_int) -> *mut c_void {
    match size(n) {
        // SAFETY: p came from x_malloc / x_realloc (SQLite never passes null here).
        Some(n) => unsafe { mi_realloc(p, n) },
        None => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn x_size(p: *mut c_void) -> c_int {
    if p.is_null() {
        return 0;
    }
    // SAFETY: p came from x_malloc / x_realloc and is still live.
    let usable = unsafe { mi_usable_size(p) };
    c_int::try_from(usable).unwrap_or(c_int::MAX)
}

unsafe extern "C" fn x_roundup(n: c_int) -> c_int {
    match size(n) {
        // SAFETY: a pure function of its argument.
        Some(n) => c_int::try_from(unsafe { mi_good_size(n) }).unwrap_or(c_int::MAX),
        None => n,
    }
}

unsafe extern "C" fn x_init(_: *mut c_void) -> c_int {
    SQLITE_OK
}

unsafe extern "C" fn x_shutdown(_: *mut c_void) {}
