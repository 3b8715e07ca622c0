"""Small control tasks with a known answer, for the algorithm's tests and benchmarks:
masked-velocity CartPole and Pendulum (memory needed), environments of known risk (the CVaR
constraint and the critic's fidelity) and a CartPole whose semantics change by phase
(plasticity)."""
