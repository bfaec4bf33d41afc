package proof

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText prints results as a table, one row per workload, store and
// mode, followed by each run's violations and notes.
func WriteText(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSTORE\tMODE\tATTEMPTS\tACKED\tINDETERMINATE\tLOST\tSTALE\tDUPLICATES\tLINEARIZABLE\tFAULTS\tVERDICT")
	for _, r := range results {
		if r.Verdict == VerdictSkipped || r.Verdict == VerdictError {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", r.Workload, r.Store, r.Verdict)
			continue
		}
		faults := formatFaults(r.Faults)
		for _, mode := range []string{Guarded, Control} {
			m := r.Guarded
			verdict := r.Verdict
			if mode == Control {
				m = r.Control
				verdict = "violation expected: " + yes(m.Count > 0)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n",
				r.Workload, r.Store, mode, m.Attempts, m.Acknowledged, m.Indeterminate, m.Lost, m.StaleAdmitted, m.Duplicates,
				linText(m.Linearizable), faults, verdict)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		head := fmt.Sprintf("\n%s on %s (%s): %s", r.Workload, r.Store, r.Detail, r.Verdict)
		switch r.Verdict {
		case VerdictSkipped:
			fmt.Fprintf(w, "%s: %s\n", head, r.Note)
			continue
		case VerdictError:
			fmt.Fprintf(w, "%s: %s\n", head, r.Error)
			continue
		}
		fmt.Fprintf(w, "%s after %v\n", head, r.Duration.Round(100e6))
		switch r.Verdict {
		case VerdictPass:
			fmt.Fprintln(w, "  the guarded run showed no violation; the unguarded control, under the same faults, did:")
		case VerdictFail:
			fmt.Fprintln(w, "  VIOLATION in the guarded run:")
		case VerdictInconclusive:
			fmt.Fprintln(w, "  INCONCLUSIVE: the unguarded control showed no violation, so the faults did not bite; run longer")
		}
		for _, mode := range []string{Guarded, Control} {
			m := r.Guarded
			if mode == Control {
				m = r.Control
			}
			if m.Count > 0 {
				fmt.Fprintf(w, "  %s: %d violation(s)\n", mode, m.Count)
				for _, v := range m.Violations {
					fmt.Fprintf(w, "    - %s\n", v)
				}
			}
			if len(m.Errors) > 0 {
				fmt.Fprintf(w, "  %s errors: %s\n", mode, formatFaults(m.Errors))
			}
			if s := m.Succession; s != nil {
				fmt.Fprintf(w, "  %s: a new leader after %d term(s) whose leader went down: at most %v after the leader went down plus a TTL (allowed %v); after %d resignation(s): at most %v (allowed %v)\n",
					mode, s.Deaths, s.AfterDeath.Round(time.Millisecond), s.AllowanceDeath.Round(time.Millisecond),
					s.Resignations, s.AfterResignation.Round(time.Millisecond), s.AllowanceResignation.Round(time.Millisecond))
			}
		}
		for _, f := range r.Files {
			fmt.Fprintf(w, "  wrote %s\n", f)
		}
		if r.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", r.Note)
		}
	}
	return nil
}

// WriteJSON prints results as one JSON array.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// Failed reports whether any result is a violation, an inconclusive run
// or an error: every case in which the run did not prove what it must.
func Failed(results []Result) bool {
	for _, r := range results {
		switch r.Verdict {
		case VerdictFail, VerdictInconclusive, VerdictError:
			return true
		}
	}
	return false
}

func yes(b bool) string {
	if b {
		return "shown"
	}
	return "NOT SHOWN"
}

func linText(b *bool) string {
	switch {
	case b == nil:
		return "-"
	case *b:
		return "yes"
	}
	return "NO"
}

func formatFaults(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, ",")
}
