package server

import "io/fs"

// UIFiles returns the dashboard's embedded files (for tests).
func UIFiles() fs.FS { return uiFiles }

// ValidateJSON checks a decoded JSON value against a schema of the
// decoded OpenAPI document (for tests).
var ValidateJSON = validateJSON

// SetOnWait makes s call f each time an acquire starts to wait for a held
// key (for tests).
func (s *Server) SetOnWait(f func()) { s.onWait = f }

// DrainedNote ends the detail of the held answer to an acquire that was
// waiting when the server began to drain (for tests).
const DrainedNote = drainedNote
