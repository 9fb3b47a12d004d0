package tools

// InvalidEntry is an mcp.json entry that did not validate: skipped, or
// still running its last good version (Running).
type InvalidEntry struct {
	// Name is the entry's key as written, ID its tool-safe id.
	Name string `json:"name"`
	ID   string `json:"id"`
	// Reason names the file, line and column of every problem.
	Reason string `json:"reason"`
	// Running is set when the runner keeps the entry's last good version.
	Running bool `json:"running,omitempty"`
}

// SetInvalid replaces the invalid entries status reports.
func (r *Runner) SetInvalid(entries []InvalidEntry) {
	r.invalid.Store(&entries)
}

// Invalid are the invalid entries status reports: the last SetInvalid,
// else Config.Invalid.
func (r *Runner) Invalid() []InvalidEntry {
	if p := r.invalid.Load(); p != nil {
		return *p
	}
	return r.cfg.Invalid
}
