"""rdmacoll-bench's parts: options, collectives (sizes, inputs, references, busbw),
impl (the implementation interface and rdmacoll's), timing, sweep, report, plot, tune,
launch. The console script is rdmacoll.bench:main."""
