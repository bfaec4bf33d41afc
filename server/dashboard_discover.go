package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// Bounds of the dashboard's discovery (api/discover).
const (
	// maxDiscovered is the most jobs, users and elections one answer
	// lists of each.
	maxDiscovered = 50
	// discoverPage and discoverCalls bound the lease list reads that find
	// the jobs.
	discoverPage  = 200
	discoverCalls = 8
	// maxDiscoverPrefixes is the most namespaces of a token whose users
	// are listed (one store read each).
	maxDiscoverPrefixes = 8
)

// discoverCost is what one discovery is charged against the token's rate
// limit: the most store reads it makes.
const discoverCost = discoverCalls + maxDiscovered + maxDiscoverPrefixes + 1

// discovered is one list of the dashboard's discovery: its items, whether
// there were more than it holds, and why it is empty or incomplete when
// it is (the token may not see it, the store does not list it, an error).
type discovered[T any] struct {
	Items     []T    `json:"items"`
	Truncated bool   `json:"truncated,omitempty"`
	Note      string `json:"note,omitempty"`
}

// discoveredJob is a job the schedule's claims show, with its registered
// definition when it has one.
type discoveredJob struct {
	Job        string    `json:"job"`
	Spec       string    `json:"spec,omitempty"`
	Node       string    `json:"node,omitempty"`
	Registered time.Time `json:"registered,omitzero"`
}

// discoveredUser is a user with live sessions.
type discoveredUser struct {
	UserID   string    `json:"user_id"`
	Sessions int       `json:"sessions"`
	Newest   time.Time `json:"newest,omitzero"`
}

// discoveredLimit is a limit of Config.Limits.
type discoveredLimit struct {
	Name        string            `json:"name"`
	Algorithm   string            `json:"algorithm"`
	Rate        int               `json:"rate"`
	Period      serveapi.Duration `json:"period"`
	Burst       int               `json:"burst"`
	Description string            `json:"description,omitempty"`
}

// discoveredElection is an election (the lease election/NAME).
type discoveredElection struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Held   bool   `json:"held"`
	Leader string `json:"leader,omitempty"`
	Fence  uint64 `json:"fence,omitempty"`
}

// discovery is the answer of api/discover.
type discovery struct {
	Jobs      discovered[discoveredJob]      `json:"jobs"`
	Users     discovered[discoveredUser]     `json:"users"`
	Limits    discovered[discoveredLimit]    `json:"limits"`
	Elections discovered[discoveredElection] `json:"elections"`
}

// discover answers what the dashboard's forms can offer, so that an
// operator need not know names by heart: the jobs (from the schedule's
// claim keys, with their registered definitions), the users with live
// sessions (a store that lists them: sessiondriver.UserLister), the rate
// limits of Config.Limits and the elections. Each list is bounded, holds
// only what the token's namespaces hold, and is empty, with a note, when
// the token may not call the operation that shows it (slotHistory,
// listSessions, allowRate, listLeases). No token or secret is in it.
func (d *dashboard) discover(w http.ResponseWriter, r *http.Request, p principal) {
	if ok, wait := d.s.charge(r.Context(), p.t.name, discoverCost); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		writeProblem(w, serveapi.NewProblem(serveapi.TypeRateLimited, "token \""+p.t.name+"\" is over its rate limit"))
		return
	}
	ctx := r.Context()
	out := discovery{
		Jobs:      d.discoverJobs(ctx, p),
		Users:     d.discoverUsers(ctx, p),
		Limits:    d.discoverLimits(p),
		Elections: d.discoverElections(ctx, p),
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// may reports whether p may call op, and the note of a list it may not
// see otherwise.
func (p principal) may(op string) (bool, string) {
	if p.t.all || p.t.ops[op] {
		return true, ""
	}
	return false, "token \"" + p.t.name + "\" may not call " + op
}

// discoverJobs lists the jobs whose claim keys (schedule/JOB/...) the
// schedule's lease store remembers, skipping from one job to the next, in
// p's namespaces, with their registered definitions.
func (d *dashboard) discoverJobs(ctx context.Context, p principal) discovered[discoveredJob] {
	out := discovered[discoveredJob]{Items: []discoveredJob{}}
	if ok, note := p.may("slotHistory"); !ok {
		out.Note = note
		return out
	}
	st := d.s.st.Schedules
	if st == nil {
		out.Note = "the store does not keep scheduled jobs"
		return out
	}
	l, ok := st.Claims().(lease.Lister)
	if !ok {
		out.Note = "the store does not list the claims of its jobs: type a job's name"
		return out
	}
	const prefix = "schedule/"
	after := ""
	seen := map[string]bool{}
	more := true
	for calls := 0; more && calls < discoverCalls && len(out.Items) < maxDiscovered; calls++ {
		infos, err := l.List(ctx, prefix, after, discoverPage)
		if err != nil {
			out.Note = "the jobs could not be listed: " + problemOf(err).Detail
			return out
		}
		more = len(infos) == discoverPage
		last := ""
		for _, in := range infos {
			job, _, ok := scheddriver.JobOfKey(in.Key)
			if !ok {
				continue
			}
			last = job
			if seen[job] || !p.allows(job) {
				continue
			}
			seen[job] = true
			if len(out.Items) == maxDiscovered {
				out.Truncated = true
				break
			}
			out.Items = append(out.Items, discoveredJob{Job: job})
		}
		if last == "" {
			break
		}
		// Past every key of the last job seen: the next call starts at the
		// next job.
		after = prefix + last + "/\U0010FFFF"
	}
	if more && !out.Truncated {
		out.Truncated = true
	}
	for i := range out.Items {
		def, err := st.Definition(ctx, out.Items[i].Job)
		switch {
		case errors.Is(err, schedule.ErrNotFound):
		case err != nil:
			out.Note = "a job's definition could not be read: " + problemOf(err).Detail
		default:
			out.Items[i].Spec, out.Items[i].Node, out.Items[i].Registered = def.Spec, def.Node, utc(def.Registered)
		}
	}
	slices.SortFunc(out.Items, func(a, b discoveredJob) int { return strings.Compare(a.Job, b.Job) })
	return out
}

// discoverUsers lists the users with live sessions in p's namespaces,
// the most recently active (newest session) first.
func (d *dashboard) discoverUsers(ctx context.Context, p principal) discovered[discoveredUser] {
	out := discovered[discoveredUser]{Items: []discoveredUser{}}
	if ok, note := p.may("listSessions"); !ok {
		out.Note = note
		return out
	}
	ul, ok := d.s.st.Sessions.(sessiondriver.UserLister)
	if !ok {
		out.Note = "the store does not list the users that have sessions: type a user ID"
		return out
	}
	prefixes := slices.Clone(p.t.prefixes)
	if slices.Contains(prefixes, "") {
		prefixes = []string{""}
	}
	if len(prefixes) > maxDiscoverPrefixes {
		prefixes, out.Truncated = prefixes[:maxDiscoverPrefixes], true
	}
	seen := map[string]bool{}
	for _, pre := range prefixes {
		// One more than shown, to tell whether there are more.
		us, err := ul.Users(ctx, pre, "", maxDiscovered+1)
		if err != nil {
			out.Note = "the users could not be listed: " + problemOf(err).Detail
			break
		}
		if len(us) > maxDiscovered {
			us, out.Truncated = us[:maxDiscovered], true
		}
		for _, u := range us {
			if !InNamespace(u.UserID, pre) || seen[u.UserID] {
				continue // listed by raw prefix; a namespace is a path segment
			}
			seen[u.UserID] = true
			out.Items = append(out.Items, discoveredUser{UserID: u.UserID, Sessions: u.Sessions, Newest: utc(u.Newest)})
		}
	}
	slices.SortFunc(out.Items, func(a, b discoveredUser) int {
		return cmp.Or(b.Newest.Compare(a.Newest), strings.Compare(a.UserID, b.UserID))
	})
	if len(out.Items) > maxDiscovered {
		out.Items, out.Truncated = out.Items[:maxDiscovered], true
	}
	return out
}

// discoverLimits lists Config.Limits, for a token that may judge limits.
func (d *dashboard) discoverLimits(p principal) discovered[discoveredLimit] {
	out := discovered[discoveredLimit]{Items: []discoveredLimit{}}
	if ok, note := p.may("allowRate"); !ok {
		out.Note = note
		return out
	}
	for _, l := range d.s.cfg.Limits {
		out.Items = append(out.Items, discoveredLimit{Name: l.Name, Algorithm: l.Algorithm, Rate: l.Rate,
			Period: serveapi.Duration(l.Period), Burst: l.Burst, Description: l.Description})
	}
	if len(out.Items) == 0 {
		out.Note = "the server's configuration describes no limits (limits in its --config file): enter a limit by hand"
	}
	return out
}

// discoverElections lists the elections (the leases election/NAME) as
// listLeases shows them to p.
func (d *dashboard) discoverElections(ctx context.Context, p principal) discovered[discoveredElection] {
	out := discovered[discoveredElection]{Items: []discoveredElection{}}
	st, body := d.call(ctx, p, "listLeases",
		"/v1/leases?"+url.Values{"prefix": {election.KeyPrefix}, "limit": {strconv.Itoa(maxDiscovered + 1)}}.Encode(), nil)
	if st != http.StatusOK {
		var pr serveapi.Problem
		if json.Unmarshal(body, &pr) == nil && pr.Detail != "" {
			out.Note = pr.Detail
		} else {
			out.Note = "the elections could not be listed (" + strconv.Itoa(st) + ")"
		}
		return out
	}
	var l serveapi.LeaseList
	if err := json.Unmarshal(body, &l); err != nil {
		out.Note = "the elections could not be read"
		return out
	}
	for _, in := range l.Leases {
		if len(out.Items) == maxDiscovered {
			out.Truncated = true
			break
		}
		name := strings.TrimPrefix(in.Key, election.KeyPrefix)
		e := discoveredElection{Name: name, Key: in.Key, Held: in.Held, Fence: in.Fence}
		if in.Held {
			e.Leader = in.Holder
		}
		out.Items = append(out.Items, e)
	}
	return out
}
