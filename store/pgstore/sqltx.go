package pgstore

import (
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/schedule"
)

// The transactional surface shared with sqlitestore: the same methods on
// *sql.Tx.
var (
	_ fence.SQLGuard        = (*Store)(nil)
	_ idempotency.TxStore   = (*Store)(nil)
	_ schedule.SQLCompleter = (*Store)(nil)
)
