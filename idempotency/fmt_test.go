package idempotency_test

import "fmt"

func fmtAll(v any) string { return fmt.Sprintf("%v %+v %#v %s %q", v, v, v, v, v) }
