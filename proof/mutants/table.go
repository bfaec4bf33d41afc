package mutants

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints one row per mutant: whether the proof and the
// conformance suite caught it and how long each took, then what caught
// each mutant or why nothing did, then the survivors.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTANT\tSTORE\tCAUGHT BY PROOF\tCAUGHT BY CONFORMANCE\tWORKLOADS")
	for _, r := range results {
		p, c := r.Proof.String(), r.Conformance.String()
		if r.Err != nil {
			p, c = "ERROR", "ERROR"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Mutant.Name, r.Mutant.Store, p, c, strings.Join(r.Mutant.Workloads, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	survivors := 0
	for _, r := range results {
		fmt.Fprintf(w, "%s: %s\n", r.Mutant.Name, r.Mutant.Breaks)
		if r.Err != nil {
			fmt.Fprintf(w, "  error: %v\n", r.Err)
		} else {
			fmt.Fprintf(w, "  proof: %s\n  conformance (-run %s): %s\n", r.Proof.Detail, r.Mutant.Pattern(), r.Conformance.Detail)
		}
		if r.Survived() {
			survivors++
		}
	}
	fmt.Fprintf(w, "\n%d mutants, %d caught by both suites, %d survived\n", len(results), len(results)-survivors, survivors)
	return nil
}
