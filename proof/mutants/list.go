package mutants

// List returns every mutant. Each breaks one guarantee on one store; the
// fragments are exact and must each occur once in their file.
func List() []Mutant { return list }

var list = []Mutant{
	// Fence admission, strict: a fence equal to the greatest admitted one
	// is refused.
	{
		Name:   "memory/fencedset-strict-admits-equal",
		Store:  "memory",
		Breaks: "FencedSet (strict) admits a fence equal to the greatest admitted one",
		Edits: []Edit{{File: "store/memstore/memstore.go",
			Old: "return s.fencedSet(ctx, resource, f, value, fence.Strict)",
			New: "return s.fencedSet(ctx, resource, f, value, fence.AtLeast)"}},
		Workloads:   []string{"fenced-register"},
		Conformance: "TestConformance/Lease/",
		CI:          true,
	},
	{
		Name:   "sqlite/admit-strict-true",
		Store:  "sqlite",
		Breaks: "Admit's max-fence comparison in the upsert replaced by true: any fence is admitted",
		Edits: []Edit{{File: "store/sqlitestore/sqlitestore.go",
			Old: "ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence\n\t\t\tWHERE $F.fence < excluded.fence",
			New: "ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence\n\t\t\tWHERE true"}},
		Workloads:   []string{"fenced-register"},
		Conformance: "TestConformance/Lease/",
		CI:          true,
	},
	{
		Name:   "redis/holderset-max-fence",
		Store:  "redis",
		Breaks: "HolderSet reduced to a max-fence check: the holder's token and fence are not compared, so a holder whose lease expired still writes until the next holder has",
		Edits: []Edit{{File: "store/redisstore/lua/holderset.lua",
			Old: "if redis.call('GET', KEYS[1]) ~= token or redis.call('GET', KEYS[2]) ~= f then",
			New: "if false then"}},
		Workloads:   []string{"lease-counter"},
		Conformance: "TestConformance/Lease/",
		CI:          true,
	},
}
