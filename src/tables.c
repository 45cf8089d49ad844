/*-------------------------------------------------------------------------
 * tables.c
 *	  What eo's statements and checks make from the description of one of
 *	  eo's tables (an EoColumn array, see eo.h): whether a relation has
 *	  exactly those columns, the column list of a SELECT.
 *
 * Pure functions of their arguments, at the bottom of the files: the
 * files that own a table (keystore.c, tombstones.c, outbox_registry.c,
 * outbox_slots.c) keep its description next to its readers and writers.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tupdesc.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"

#include "eo.h"

/*
 * NULL if `desc` has exactly the described columns, in order, with their
 * names and types; else what differs, as a sentence for a message.  With
 * `skip_dropped`, dropped columns are no columns (a table whose columns
 * someone else could have dropped and re-added is still judged by what it
 * has now); without, any dropped column is a difference, for tables read
 * by attribute number.
 */
char *
eo_columns_mismatch(TupleDesc desc, const EoColumn *cols, int ncols, bool skip_dropped)
{
	int			n = 0;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped && skip_dropped)
			continue;
		if (att->attisdropped)
			return psprintf("column %d was dropped", i + 1);
		if (n >= ncols)
			return psprintf("it has a column \"%s\" eo did not make", NameStr(att->attname));
		if (strcmp(NameStr(att->attname), cols[n].name) != 0 || att->atttypid != cols[n].type)
			return psprintf("column %d is not \"%s\" of type %s", n + 1,
							cols[n].name, format_type_be(cols[n].type));
		n++;
	}
	if (n != ncols)
		return psprintf("it has %d columns, not %d", n, ncols);
	return NULL;
}

/* "a, b, c": the described columns, for a SELECT whose positions they are. */
char *
eo_columns_list(const EoColumn *cols, int ncols)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < ncols; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? ", " : "", cols[i].name);
	return buf.data;
}
