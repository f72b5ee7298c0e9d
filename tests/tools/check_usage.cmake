# Bad command lines and config files: exit status 2 and a message that names
# the problem. Arguments: REPLAY, TRACE (a valid trace), WORK.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/bad.cfg "# settings\ntau = 2.5\n\nfrobnicate = 1\n")
file(WRITE ${WORK}/good.cfg "tau = 2.5\nlock=4 # not a comment: rejected below\n")
file(WRITE ${WORK}/ok.cfg "# settings\ntau = 2.5\nlock = 4\npreset = gnmr\n")

include(${CMAKE_CURRENT_LIST_DIR}/expect.cmake)

expect(2 "no trace file given")
expect(2 "unknown preset 'nosuch'" ${TRACE} --preset nosuch)
expect(2 "unknown option --frob" ${TRACE} --frob 1)
expect(2 "tau must be" ${TRACE} --preset gnmr --tau -1)
# The default preset (stabilizer+gnmr-calibrated) takes rate/floor, not tau.
expect(2 "applies to neither" ${TRACE} --tau 2)
expect(2 "rate must be in (0, 0.5)" ${TRACE} --rate 0.7)
expect(0 "default " ${TRACE} --rate 0.01 --floor 1.5 --quiet)
expect(2 "is not a number" ${TRACE} --tau abc)
expect(2 "max_o must be >= 1" ${TRACE} --maxo 0)
expect(2 "does not apply to preset 'clip'" ${TRACE} --preset clip --tau 2)
expect(2 "bad.cfg:4: unknown key 'frobnicate'" ${TRACE} --config ${WORK}/bad.cfg)
expect(2 "good.cfg:2: lock: '4 # not a comment: rejected below' is not an integer" ${TRACE} --config ${WORK}/good.cfg)
expect(2 "systemic-action: 'sometimes' is not one of off, clip-triggered, global-clip, skip" ${TRACE}
  --systemic-action sometimes)
expect(2 "need the systemic rule on" ${TRACE} --preset gnmr-clip --systemic-share 0.3)
expect(2 "share must be in [0, 1]" ${TRACE} --preset gnmr-systemic --systemic-share 1.5)
expect(2 "systemic-maxo: 'x' is not a number" ${TRACE} --systemic-maxo x)
expect(0 "gnmr-systemic " ${TRACE} --preset gnmr-systemic --systemic-action skip --deny-kappa 2 --quiet)
expect(1 "cannot open trace" ${WORK}/missing.csv)
# A trace holds norms, not the noise gnmr-noise-floor steps on: --aux gives it.
expect(2 "give it with --aux FILE" ${TRACE} --preset gnmr-noise-floor)
expect(0 "usage: gnmr-replay" --help)
# Flags override the config file: lock 4 from the file, maxo 1 from the flag.
expect(0 "gnmr " ${TRACE} --config ${WORK}/ok.cfg --maxo 1 --quiet)
