package expset

// Add adds o's counts to s, for a total over several sweeps (the stats a
// WithSweepHandler receives, or several SweepOnce calls): counts add up,
// MaxLateness is the larger, MeanLateness the mean over all members removed.
func (s *SweepStats) Add(o SweepStats) { s.add(o) }
