/*-------------------------------------------------------------------------
 * eo.h
 *	  Declarations shared by eo's source files.
 *
 * Data flows one way: claim.c (the SQL-facing state machine) calls
 * keystore.c (storage of key rows) and validate.c (argument checks);
 * storage never calls back up.  eo.c holds the settings and sets up
 * shared memory and the worker.
 *-------------------------------------------------------------------------
 */
#ifndef EO_H
#define EO_H

#include "postgres.h"

#include "access/attnum.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/jsonb.h"
#include "utils/relcache.h"
#include "utils/resowner.h"

/*
 * Key states as stored in eo_keys.state.  EO_TXN_CLAIMED is a claim made in
 * transaction mode: while its transaction runs only the holder sees it, and
 * once committed it simply means "done, no result".  That is what lets a
 * plain COMMIT mark the key done without a second write.
 */
#define EO_TXN_CLAIMED	'c'
#define EO_DONE			'd'
#define EO_PROCESSING	'p'			/* lease mode, lease_expires_at set */
#define EO_FAILED		'f'			/* retry allowed after lease_expires_at */
#define EO_DEAD			'x'
#define EO_REJECTED		'r'			/* failed for good: eo_claim replays the error */

/* Limits, documented in the README. */
#define EO_MAX_KEY_BYTES		512
#define EO_MAX_FINGERPRINT_BYTES 512
#define EO_MAX_RESULT_BYTES		(1024 * 1024)	/* also a recovery state */
#define EO_MAX_POINT_BYTES		256		/* a recovery point's name */
#define EO_MAX_ERROR_BYTES		4096
#define EO_MAX_RETRY_AFTER_SECS	(366 * SECS_PER_DAY)
#define EO_MAX_RETENTION_DAYS	3650	/* an outbox's retention */
#define EO_SCOPE_MAX_NAME		63

/*
 * SQLSTATEs of eo's own refusals.  Argument errors use the standard codes
 * directly (22004, 22023, 54000); these name the ones the README lists.
 */
#define EO_ERRCODE_NOT_HELD			ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE	/* 55000 */
#define EO_ERRCODE_STALE_TOKEN		ERRCODE_OBJECT_IN_USE	/* 55006 */
#define EO_ERRCODE_FINGERPRINT		ERRCODE_DATA_EXCEPTION	/* 22000 */
#define EO_ERRCODE_NOT_OWNER		ERRCODE_INSUFFICIENT_PRIVILEGE	/* 42501 */

/* settings.c: the settings (eo.*), defined by _PG_init (eo.c) */
extern void eo_define_settings(void);

/* statement_names.c: prepared statement names eo_nats reserves (SQL's PREPARE and DEALLOCATE refuse them) */
#define EO_RESERVED_STATEMENT_PREFIX "eo_nats_"
extern void eo_reserve_statement_names(void);
extern int	eo_max_attempts;
extern int	eo_max_lease_secs;
extern int	eo_retention_secs;
extern int	eo_partition_interval_secs;
extern int	eo_naptime_secs;
extern char *eo_databases;
extern bool eo_track_counts;
extern int	eo_tombstone_retention_secs;
extern char *eo_final_sqlstates;

/* One row of eo_keys, as read or to be written. */
typedef struct EoKey
{
	text	   *key;
	int32		scope;			/* 0: no scope (scope.c) */
	Oid			owner;
	char		state;
	text	   *fingerprint;	/* NULL if none */
	Jsonb	   *result;			/* NULL if none */
	int32		attempts;
	bool		has_token;
	int64		lease_token;
	bool		has_expiry;
	TimestampTz lease_expires_at;
	text	   *last_error;		/* NULL if none */
	TimestampTz created_at;
	TimestampTz updated_at;
	/* the holder's progress (eo_recovery_point), NULL if none */
	text	   *recovery_point;
	Jsonb	   *recovery_state;
	int32		attempts_base;	/* attempts when last redriven; 0 if never */
	/* a tombstone stands for the row (tombstones.c): no result, no times */
	bool		expired;
	bool		has_fp_hash;
	int64		fp_hash;
	/* where the row is: set by eo_ks_find, eo_ks_insert and eo_ks_claim */
	int32		gen;			/* generation (table) the row lives in */
	TransactionId xmin;
	ItemPointerData tid;
} EoKey;

/*
 * tables.c: descriptions of eo's own tables.  Each table's columns are
 * listed once, as an X macro of (position name, column name, type, and
 * whatever else its file needs) in the file that owns the table; EO_COLUMN_ENUM makes the positions (1-based,
 * in list order: the enum starts with a 0 entry of the caller's), and
 * EO_COLUMN_DESC the EoColumn array that the shape check, the SELECT list
 * and the UPDATE are made from.  So a reader or writer that names a
 * column by its position is kept in step with the list by the compiler.
 */
typedef struct EoColumn
{
	const char *name;
	Oid			type;
} EoColumn;

#define EO_COLUMN_ENUM(pos, name, type, ...) pos,
#define EO_COLUMN_DESC(pos, name, type, ...) {name, type},

extern char *eo_columns_mismatch(TupleDesc desc, const EoColumn *cols, int ncols,
								 bool skip_dropped);
extern char *eo_columns_list(const EoColumn *cols, int ncols);

/* objects.c: eo's own objects, and whose rights eo acts with */
typedef struct EoCatalog
{
	Oid			ext;			/* pg_extension row */
	Oid			owner;			/* the extension owner */
	Oid			api_schema;		/* where the API was installed */
	Oid			schema;			/* eo_internal: only the owner creates here */
} EoCatalog;

typedef struct EoIdentity
{
	Oid			userid;
	int			sec_context;
	int			guc_level;		/* settings pinned by eo_become_owner; 0: none */
} EoIdentity;

#define EO_INTERNAL_SCHEMA "eo_internal"
/* The search path of everything eo runs as its owner (and of the worker). */
#define EO_SAFE_SEARCH_PATH "pg_catalog, pg_temp"

extern bool eo_catalog_load(bool missing_ok);
extern const EoCatalog *eo_catalog(void);
extern Oid	eo_namespace_owner(Oid nsp);
extern void eo_lock_internal_schema(void);
extern char *eo_internal_name(const char *relname);
extern void eo_check_own_relation(Oid relid, char relkind, bool internal, const char *what);
extern Oid	eo_own_relation(const char *relname, char relkind);
extern Oid	eo_unique_index(Relation rel, int ncols, const AttrNumber *cols);
extern void eo_become_owner(EoIdentity *saved);
extern void eo_restore_identity(const EoIdentity *saved);
extern struct _SPI_plan *eo_prepare_kept(const char *sql, int nargs, Oid *argtypes);
extern int	eo_plan_ready(struct _SPI_plan *plan);
extern void eo_free_plan_later(struct _SPI_plan *plan);
extern bool eo_plan_relations_are(struct _SPI_plan *plan, Oid a, Oid b);
extern bool eo_try(void (*fn) (void *), void *arg, ErrorData **error);

/* subxact.c */
extern ErrorData *eo_subxact_failed(MemoryContext cxt, ResourceOwner owner);
extern int	eo_pin_datetime(void);
extern void eo_unpin(int level);
extern void eo_warn_failure(ErrorData *error, const char *what, const char *hint);

/*
 * locks.c: maintenance waits at most EO_LOCK_WAIT_MS for a lock that
 * others can queue on, then leaves the object for the next pass
 */
#define EO_LOCK_WAIT_MS 100
#define EO_LOCK_WAIT_LOG_MS 50	/* the worker logs a wait this long (log_lock_waits) */

struct LOCKTAG;
extern bool eo_lock_within(const struct LOCKTAG *tag, LOCKMODE mode, int timeout_ms);
extern bool eo_lock_wait_within(const struct LOCKTAG *tag, LOCKMODE mode, int timeout_ms);
extern char *eo_lock_blockers(const struct LOCKTAG *tag, LOCKMODE mode, Oid owner,
							  bool *trusted);
extern bool eo_lock_held_by_prepared(const struct LOCKTAG *tag, LOCKMODE mode);
extern int	eo_cancel_doomed_waiters(const struct LOCKTAG *tag, LOCKMODE mode, Oid owner,
									 const char *what);

/* validate.c: each raises one clear error or returns the checked value */
extern text *eo_check_key(Datum value, bool isnull);
extern text *eo_check_fingerprint(Datum value, bool isnull);
extern void eo_warn_fingerprint_as_lease(const text *fingerprint);
extern Jsonb *eo_check_result(Datum value, bool isnull);
extern text *eo_check_recovery_point(Datum value, bool isnull);
extern Jsonb *eo_check_recovery_state(Datum value, bool isnull);
extern text *eo_check_key_prefix(Datum value, bool isnull);
typedef enum EoLeaseKind
{
	EO_LEASE_KEY,				/* eo_claim, eo_extend */
	EO_LEASE_RELAY				/* eo_relay_fetch, eo_relay_extend */
} EoLeaseKind;
extern double eo_interval_usecs(const Interval *iv);
extern int64 eo_check_lease(Datum value, bool isnull, EoLeaseKind kind);
extern int64 eo_check_retry_after(Datum value, bool isnull);
extern Interval *eo_check_interval(Datum value, bool isnull, const char *what,
								   int64 min_usecs, int64 max_usecs);
extern char *eo_usecs_text(int64 usecs);
extern text *eo_clip_error(Datum value, bool isnull);
extern char *eo_check_sqlstate(Datum value, bool isnull);
extern text *eo_check_required_text(Datum value, bool isnull, const char *what);
extern Oid	eo_check_role(Datum value, bool isnull, Oid dflt);
extern char *eo_role_name(Oid role);
extern char *eo_check_outbox_name(Datum value, bool isnull, const char *what);
extern char *eo_check_group_name(Datum value, bool isnull);
extern char *eo_check_scope_name(Datum value, bool isnull);

/* sqlstates.c: which SQLSTATEs may be final, and lists of them */
extern bool eo_sqlstate_chars(const char *s, int len);
extern bool eo_sqlstate_may_be_final(const char *s, int len);
extern bool eo_sqlstate_list_valid(const char *list, char **bad, bool *malformed);
extern bool eo_sqlstate_listed(const char *sqlstate, const char *list);

/* scope.c: namespaces of keys, each belonging to a role */
typedef struct EoScope
{
	int32		id;				/* 0: no scope */
	Oid			owner;			/* the scope's role; InvalidOid if none */
} EoScope;

extern void eo_scope_resolve(Datum value, bool isnull, Oid caller, EoScope *scope);

/* generations.c: time generations of a plain table (see its header) */
typedef struct EoGenSet
{
	const char *schema;			/* unquoted */
	const char *registry;		/* registry table */
	const char *template;		/* each generation is made LIKE this table */
	const char *prefix;			/* generation tables are prefix || gen */
} EoGenSet;

#define EO_MAX_LIVE_GENERATIONS 64

extern void eo_gen_start(const EoGenSet *set);
extern void eo_gen_bind_all(const EoGenSet *set);
/* What eo_gen_keep did about the switch. */
typedef enum EoSwitch
{
	EO_SWITCH_NOT_DUE,
	EO_SWITCH_DONE,
	EO_SWITCH_TOO_MANY,			/* due, but too many live generations */
	EO_SWITCH_LOCK_BUSY			/* due, but the registry lock was not had */
} EoSwitch;
extern EoSwitch eo_gen_keep(const EoGenSet *set, int interval_secs, int max_live,
							const char *what);
extern List *eo_gen_retire_candidates(const EoGenSet *set, int retention_secs);
extern void eo_gen_retire(const EoGenSet *set, int32 gen);
extern int	eo_gen_drop_retired(const EoGenSet *set);

/* keystore.c: storage of key rows; callers bracket calls with open/close */
typedef enum EoKsMode
{
	EO_KS_READ,					/* look keys up only */
	EO_KS_WRITE,				/* may insert new keys (makes the first generation) */
	EO_KS_MAINTAIN				/* maintenance: as WRITE, but makes no generation */
} EoKsMode;

extern bool eo_ks_exists(void);
extern void eo_ks_begin(EoKsMode mode);	/* row calls */
extern void eo_ks_open(EoKsMode mode);	/* maintenance: also SPI, as owner */
extern void eo_ks_close(void);
extern void eo_ks_make_first_generation(void);
extern void eo_ks_lock_key(const text *key, int32 scope);
extern void eo_ks_unlock_key(const text *key, int32 scope);
extern bool eo_ks_find(text *key, int32 scope, EoKey *row);
extern bool eo_ks_find_settled(text *key, int32 scope, EoKey *row, bool *in_doubt);
extern bool eo_ks_find_tombstone(text *key, int32 scope, EoKey *found);
extern bool eo_ks_insert(EoKey *row);
extern void eo_ks_insert_held(EoKey *row);

typedef enum EoKsClaim
{
	EO_KS_INSERTED,				/* the new row is written */
	EO_KS_DEFERRED,				/* no row yet: the key lock is held instead */
	EO_KS_FOUND					/* a live generation holds the key */
} EoKsClaim;

extern EoKsClaim eo_ks_claim(EoKey *row, EoKey *found, bool defer);
extern bool eo_ks_update(EoKey *row);
extern int64 eo_ks_next_token(void);
extern bool eo_ks_token_from_earlier_timeline(int64 token);
extern int64 eo_ks_reclaim_expired(TimestampTz now, int max_attempts, int limit,
								   int64 *dead);
extern const EoGenSet *eo_ks_generations(void);

/* Which keys eo_ks_each_key visits (eo_redrive_dead, eo_list_keys). */
typedef struct EoKeyFilter
{
	Oid			caller;			/* only keys of owners it has the privileges of */
	int32		scope;
	const char *states;			/* "char"[] literal of the states: "{x}" */
	text	   *prefix;			/* NULL: any key */
	bool		has_since;
	TimestampTz since;			/* last changed at or after */
	bool		has_before;
	TimestampTz before;			/* last changed before */
	bool		redrivable;		/* pass over generations in 0.2.0's shape */
} EoKeyFilter;

/* What eo_ks_each_key hands over of each key. */
typedef struct EoListedKey
{
	text	   *key;
	char		state;
	int32		attempts;
	text	   *last_error;		/* NULL if none */
	TimestampTz updated_at;
	bool		has_expiry;
	TimestampTz lease_expires_at;
} EoListedKey;
extern void eo_ks_each_key(const EoKeyFilter *f,
						   bool (*fn) (const EoListedKey *key, void *arg), void *arg);
extern bool eo_ks_prepare_retire(int32 gen, TimestampTz cutoff);
extern const char *eo_ks_generation_table(int32 gen);

/*
 * pending.c: transaction-mode claims of new keys whose row is written once,
 * at commit, with the result eo_complete gave (or none)
 */
#define EO_MAX_PENDING 16		/* per transaction; later claims write at once */

extern EoKey *eo_pending_get(const text *key, int32 scope);
extern bool eo_pending_room(void);
extern void eo_pending_add(const EoKey *row);
extern void eo_pending_set_done(EoKey *pending, Jsonb *result);
extern void eo_pending_write(const text *key, int32 scope);
extern void eo_pending_remember_held(const EoKey *row);
extern void eo_pending_forget_held(void);
extern bool eo_pending_take_held(text *key, int32 scope, EoKey *row);

/* tombstones.c: the compact second tier of retention */
typedef struct EoTomb
{
	Oid			owner;			/* the key's owner */
	char		state;			/* EO_DONE or EO_DEAD */
	bool		has_fp;
	int64		fp;				/* the fingerprint's hash */
} EoTomb;

extern int64 eo_ts_fingerprint_hash(const text *fingerprint);
extern bool eo_ts_find(int32 scope, const text *key, EoTomb *tomb);
extern int64 eo_ts_bury(const char *keys);
extern void eo_ts_maintain(void);

/* outcome.c: whether a failure is final, and the replay of a final one */
extern bool eo_failure_is_final(const char *sqlstate, int final_arg);
extern Jsonb *eo_rejection_result(const char *sqlstate, text *error);
extern void eo_replay_rejection(const EoKey *row);	/* raises */

/* claim.c: the one transition that redrive.c drives for many keys */
extern bool eo_redrive_key(text *key, int32 scope, Oid caller, bool quiet);
/* claim.c: a stored state's name, as eo_status shows it (key_list.c too) */
extern const char *eo_state_name(char state);

/* maintain.c: one maintenance pass, shared by eo_maintain() and the worker */
typedef struct EoPassStats
{
	int64		reclaimed;		/* expired leases turned failed or dead */
	int64		dead;			/* of which became dead */
	int64		switched;		/* generations made current */
	int64		retired;		/* generations no longer read */
	int64		dropped;		/* generation tables dropped */
	int64		outbox_failures;	/* outboxes that could not be kept */
	int64		postponed_retention;	/* switch due, too many live generations */
	int64		postponed_lock;	/* switch due, the registry lock not had */
} EoPassStats;

/* The steps of a pass, for counting the ones that failed. */
typedef enum EoStep
{
	EO_STEP_DROP,
	EO_STEP_RECLAIM,
	EO_STEP_SWITCH,
	EO_STEP_RETIRE,
	EO_STEP_OUTBOX,
	EO_NSTEPS
} EoStep;

extern void eo_reclaim_step(EoPassStats *stats, bool *more);
extern void eo_switch_step(EoPassStats *stats);
extern void eo_retire_step(EoPassStats *stats);
extern void eo_drop_step(EoPassStats *stats);
extern void eo_outbox_step(EoPassStats *stats);

/* stats.c: cumulative counters behind eo_metrics_* (shared memory, preload) */
typedef enum EoStat
{
	EO_STAT_DUPLICATES,			/* eo_claim answered 'duplicate' */
	EO_STAT_FINGERPRINT_CONFLICTS,	/* a fingerprint mismatch was refused */
	EO_STAT_STALE_TOKENS,		/* a stale lease token (key or relay batch) was refused */
	EO_STAT_CLAIMED,			/* eo_claim answered 'claimed' */
	EO_STAT_BUSY,				/* eo_claim answered 'busy' */
	EO_STAT_DEAD_ANSWERS,		/* eo_claim answered 'dead' */
	EO_STAT_TAKEN_OVER,			/* a claim took over an expired lease */
	EO_STAT_COMPLETED,			/* eo_complete calls that returned */
	EO_STAT_FAILED,				/* eo_fail calls that returned */
	EO_STAT_KEYS_DEAD,			/* keys that became dead (any way) */
	EO_STAT_RECLAIMED,			/* expired leases reclaimed by maintenance */
	EO_STAT_PASSES,				/* maintenance passes finished */
	EO_STAT_SWITCHED,			/* key generations switched */
	EO_STAT_RETIRED,			/* key generations retired */
	EO_STAT_DROPPED,			/* key generation tables dropped */
	EO_STAT_POSTPONED_RETENTION,	/* switches postponed: too many generations */
	EO_STAT_POSTPONED_LOCK,		/* switches postponed: registry lock busy */
	EO_STAT_OUTBOX_FAILURES,	/* outboxes a pass could not keep */
	EO_STAT_STEP_ERRORS,		/* first of EO_NSTEPS: steps that failed */
	/* a lock maintenance gave up waiting for (locks.c): object left for later */
	EO_STAT_LOCK_WAITS_GIVEN_UP = EO_STAT_STEP_ERRORS + EO_NSTEPS,
	EO_STAT_REDRIVEN,			/* dead keys redriven (eo_redrive, eo_redrive_dead) */
	EO_NSTATS
} EoStat;

extern Size eo_stats_shmem_size(void);
extern void eo_stats_shmem_init(void);
extern void eo_stat_count(EoStat stat);
extern void eo_stat_add(EoStat stat, int64 n);
extern void eo_stat_step_failed(EoStep step);
extern void eo_stat_pass_done(const EoPassStats *stats, TimestampTz started);

/* outbox_doorbell.c: waking idle relays at commit (shared memory, preload) */
extern Size eo_doorbell_shmem_size(void);
extern void eo_doorbell_shmem_init(void);
extern void eo_doorbell_ring_at_commit(Oid outbox);
extern uint64 eo_doorbell_read(Oid outbox);
extern bool eo_doorbell_wait(Oid outbox, uint64 seen, int64 timeout_ms);

/* bgworker.c: short-lived workers of eo's in one database */
struct BackgroundWorker;
extern void eo_db_worker_init(struct BackgroundWorker *worker, const char *function,
							  const char *name, Oid dboid);
extern bool eo_run_helper(const char *function, const char *name);

/* worker.c: the launcher and the passes it schedules */
extern void eo_register_launcher(void);


/* fencing.c: tokens strictly increasing across promotions */
#define EO_LEASE_EPOCH_SHIFT 40		/* lease tokens: epoch above 40 bits */
#define EO_LEASE_MAX_EPOCH 8191		/* ... so below 2^53 */
#define EO_RELAY_EPOCH_SHIFT 40		/* relay tokens: the same (outbox_relay.h) */
#define EO_RELAY_MAX_EPOCH 8191
extern int64 eo_fenced_nextval(Oid seq, int shift, int64 max_epoch);
extern bool eo_token_from_earlier_timeline(Oid seq, int shift, int64 token);
extern void eo_fencing_keep(void);

#endif							/* EO_H */
