// Package kind makes the primitives' sentinel errors: each has its own
// message and matches one of the kinds of package tenure with errors.Is.
package kind

// New returns a sentinel error with message msg that is of kind k:
// errors.Is(err, k) holds for it and for every error wrapping it, and
// errors.Is(err, other) only for other == err itself or k.
func New(msg string, k error) error { return &sentinel{msg: msg, kind: k} }

type sentinel struct {
	msg  string
	kind error
}

func (e *sentinel) Error() string { return e.msg }

// Is reports whether target is e's kind (errors.Is compares e itself
// before asking).
func (e *sentinel) Is(target error) bool { return target == e.kind }
