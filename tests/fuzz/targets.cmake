# One line per fuzz target: sp_add_fuzz_target(<name> LIBS <libs>)
# builds tests/fuzz/fuzz_<name>.c and replays tests/fuzz/corpus/<name>/.
sp_add_fuzz_target(base64 LIBS space-common)
sp_add_fuzz_target(json LIBS space-common-core)
sp_add_fuzz_target(config LIBS space-common-core)
sp_add_fuzz_target(error_shape LIBS space-proto)
sp_add_fuzz_target(agent_proto LIBS space-proto)
