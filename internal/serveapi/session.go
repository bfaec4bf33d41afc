package serveapi

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// MaxSessionNameLen is the longest name of a session value, in bytes.
const MaxSessionNameLen = 255

// MaxSessionValueLen is the largest session value, in bytes (1 MiB).
const MaxSessionValueLen = 1 << 20

// ValidateSessionName checks the name of a session value: not empty, at
// most MaxSessionNameLen bytes of UTF-8 without control characters. A bad
// name wraps session.ErrInvalid.
func ValidateSessionName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty value name", session.ErrInvalid)
	case len(name) > MaxSessionNameLen:
		return fmt.Errorf("%w: value name is %d bytes, longer than %d", session.ErrInvalid, len(name), MaxSessionNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: value name is not valid UTF-8", session.ErrInvalid)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: value name contains the control character %U", session.ErrInvalid, r)
		}
	}
	return nil
}

// ValidateSessionValue checks a session value's user, name and value (at
// most MaxSessionValueLen bytes). Bad input wraps session.ErrInvalid.
func ValidateSessionValue(userID, name string, value []byte) error {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return err
	}
	if err := ValidateSessionName(name); err != nil {
		return err
	}
	if len(value) > MaxSessionValueLen {
		return fmt.Errorf("%w: value is %d bytes, larger than %d", session.ErrInvalid, len(value), MaxSessionValueLen)
	}
	return nil
}
