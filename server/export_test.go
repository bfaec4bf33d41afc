package server

import "io/fs"

// UIFiles returns the dashboard's embedded files (for tests).
func UIFiles() fs.FS { return uiFiles }
