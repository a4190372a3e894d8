"""Held-out policy families for the transfer-cube task, written apart from r2s2r's own demonstrators.

Each family is a scripted controller that generated none of the world model's training data, so that the
world model can be judged on policies it has never seen. Each module has an import-path factory
(`families.<name>:make_policy`, kwargs = that family's knobs) and a `FAMILY_SETTINGS` dict of named
settings whose success rates in the reference world (`measure.py`, `measured.json`) spread from failure to
success.

| module          | how it acts                                                                 |
|-----------------|-----------------------------------------------------------------------------|
| `waypoint`      | Cartesian waypoints, top-down grasp, IK every step; reads the cube pose      |
| `jointspace`    | joint keyframes solved once, minimum-jerk, angled grasp; reads the cube pose |
| `camera`        | finds the cube in the top image only, then acts like `waypoint`              |
| `pincer`        | Cartesian servo on the cube read every step, low side grasp, wrist roll,     |
|                 | take from above; phases end on arrival, not on a clock                       |
| `relay`         | velocity-limited Cartesian moves planned per phase, grasp tilted back from   |
|                 | the far side, low hand-over, left pinches top and bottom faces from the side |
| `retry`         | joint-filtered setpoint, steep grasp checked from the cube pose and retried  |
|                 | with the measured miss corrected; cube tipped a quarter turn at a high       |
|                 | hand-over, left takes from above and checks its take by its finger opening   |
| `rate`          | resolved-rate: twist toward the phase's pose through the Jacobian's damped   |
|                 | pseudo-inverse every step; 45-degree grasp from the right's own side, low    |
|                 | hand-over at the table centre, left level, pinching top and bottom faces     |
| `stall`         | joint-space cubic splines planned per phase; grasps by feel (closes until    |
|                 | the fingers stall, squeezes, judges the hold by the stalled opening, re-     |
|                 | approaches once); front grasp, cube tipped up at a left-half hand-over,      |
|                 | left takes from above, slightly tilted, after its own feel-check             |
| `overlap`       | concurrent minimum-jerk Cartesian trajectories, IK every step, no turns:     |
|                 | the left sets off while the right still grasps, predicts the moving cube     |
|                 | from its last poses and closes on it while the right still carries it along  |
|                 | a slow path toward the centre; the right opens once the left's fingers stop  |
| `table`         | Bezier arcs in Cartesian space, IK every step, arms taking turns: no mid-air |
|                 | hand-over; the right sets the cube down top-down at the table centre, lets   |
|                 | go and rises clear, the left re-reads the cube where it lies and picks it up |
|                 | top-down, wrist turned a quarter turn, pinching the other pair of faces      |
| `nudge`         | straight Cartesian segments, IK every step: the right first pushes the cube  |
|                 | along the table to its centre with closed fingers, re-reads it, grasps it    |
|                 | top-down and lifts it; mid-air hand-over, the left slides in level from -x   |
|                 | and pinches the top and bottom faces, then the right opens and backs off     |
| `catch`         | joint-space keyframes, IK once per move, synchronised trapezoidal velocity;  |
|                 | grasp from above leaning out for far cubes, cube turned level and square at  |
|                 | a high hand-over; the right lets go first, the left waits open and level     |
|                 | around/below it and closes on the falling cube when its predicted fall meets |
|                 | the fingers                                                                  |
| `pivot`         | two rates: Cartesian setpoint solved by IK at 10 Hz, a 50 Hz joint spring-   |
|                 | damper follows it; top-down grasp, the cube handed over tipped 45 degrees    |
|                 | about the right's finger axis, the left comes down at 45 degrees toward +x   |
|                 | and pinches the tipped top and bottom faces, after re-reading the cube pose  |
| `swivel`        | impedance-like: a minimum-jerk reference plus a bounded spring offset grown  |
|                 | from the measured pose error, IK every step; top-down grasp, the cube        |
|                 | swivelled about the vertical in hand to face the left's shoulder at a        |
|                 | hand-over in front of the centre; the left slides in level along that        |
|                 | heading, pinches the top and bottom faces; the right opens once the left's   |
|                 | finger opening has stopped shrinking                                         |
| `field`         | potential fields: the joint command descends an attractive well, a table     |
|                 | wall and a keep-out between the wrists by Jacobian-transpose steps; top-down |
|                 | grasp on the x faces, a high hand-over, the left comes up from below at 30   |
|                 | degrees and pinches the y faces, crossed; the right opens on the slip it     |
|                 | feels in the cube's pose after the left's tug                                |
| `joust`         | cyclic re-planner: every 8 steps the goal is re-solved by IK and a quintic   |
|                 | laid in joint space from the command's position and velocity; guarded moves  |
|                 | with timeouts; top-down grasp, the right's gripper then turned level toward  |
|                 | the left's shoulder (cube rolled a quarter turn in hand) between the         |
|                 | shoulders; the left slides in coaxially, nose to nose, fingers crossed, and  |
|                 | pinches the top and bottom faces; the right opens once the left's opening    |
|                 | has come down and held still                                                 |
| `teleop`        | simulated human at a leader arm, seeing the state `delay` steps late: each   |
|                 | hand sums overlapping minimum-jerk sub-movements, each aimed at the error    |
|                 | it sees (efference copy of those under way), covering only part of it, a     |
|                 | new one every 160-300 ms; 8-12 Hz tremor on the hand, IK every step, a       |
|                 | low-pass lag to the follower; the right comes 60 degrees down from its       |
|                 | front corner, wrist rolled to square the fingers to the x faces, closes by   |
|                 | feel (squeezes until the opening stalls, then past it), pitches its wrist    |
|                 | up to 25 degrees on the carry to a hand-over left of centre, in front; the   |
|                 | left comes up the right's own axis from below, fingers crossed, tips short   |
|                 | of the right's (each hand holds one half); the right opens once it sees,     |
|                 | late, the left's finger opening come down and hold still; or, impatient,     |
|                 | on seeing the left's hand arrive                                             |
| `shoot`         | sampling-based optimizer, no IK anywhere: each phase's joint goal is chosen  |
|                 | by cross-entropy search (CEM) scored by FK alone (wrist centre, then wrist,  |
|                 | then all six joints); a second CEM bends a Bezier path for table clearance   |
|                 | and, for the left, a keep-out around the right's wrist; played on a          |
|                 | minimum-jerk clock. The right grasps from the cube's +y side, pitched 60     |
|                 | degrees down, on its x faces, and turns its gripper top-down on the way to   |
|                 | a high hand-over right of the centre, the cube hanging below its fingers;    |
|                 | the left reaches across from -x, 20 degrees down, and pinches the free y     |
|                 | faces, its fingers either side of the right's; the right opens once the      |
|                 | left's opening has come down and held still; flaws: sample budget, travel    |
|                 | weight, biased cube reading, wrong table height, short horizon, weak close,  |
|                 | early release, joint-command noise                                           |
| `mimic`         | learned: an MLP trained by behaviour cloning (DART-noised demos of its own   |
|                 | scripted expert) reads proprio, the cube pose and a phase clock and predicts |
|                 | 10-action chunks, averaged over overlapping chunks (ACT's temporal           |
|                 | ensembling); the expert grasps from +x, 55 degrees down, on the y faces, and |
|                 | meets the left nose to nose at a high hand-over left of centre, both pitched |
|                 | 40 degrees down, the left pinching the y faces on the cube's -x half;        |
|                 | settings are a user's runs: early checkpoints, 3 or 6 demos, a narrow net,   |
|                 | clean demos only, joint-command noise, open-loop chunks                      |
| `kalman`        | acts on an estimate: a simulated camera (noise, a drifting bias, dropped and |
|                 | late readings, readings pulled toward fingers within 6 cm) feeds a Kalman    |
|                 | filter (constant velocity, decaying; once a finger opening shows a hold, the |
|                 | cube fixed in that gripper); a joint-velocity MPC over 6 steps solved by     |
|                 | regularised least squares follows a minimum-jerk path to a goal that moves   |
|                 | with the estimate; top-down grasp on the y faces, a low hand-over on the     |
|                 | left's side, the left comes in level from the front and pinches the free x   |
|                 | faces; the right lets go once the left's opening has stalled on the cube     |
| `tree`          | a behaviour tree ticked every control step: sequences, fallbacks and         |
|                 | conditions (cube between the fingers, grip closed on it, grasp holds,        |
|                 | lifted, at the hand-over, left has it) over straight Cartesian moves with    |
|                 | speed and acceleration limits, IK every step; recoveries re-pick a missed or |
|                 | dropped cube and retry a failed take; the right holds the cube top-down by   |
|                 | its upper half, the left takes it level from behind (+y), pinching the lower |
|                 | half of the free x faces under the right's finger tips                       |
| `tuned`         | tuned by episodic RL in the reference world: 15 parameters (grasp offsets,   |
|                 | approach, close levels, lift, hand-over point, the left's offsets, phase     |
|                 | times, release) of keyframes solved once by IK and joined by minimum-jerk    |
|                 | joint moves, chosen by cross-entropy search on the env's staged reward; the  |
|                 | right comes in from its own side on the y faces, the left comes straight     |
|                 | down and pinches the x faces; the tuned policies exploit the reward: the     |
|                 | cube slips from the right's shallow grasp and the left picks it up from the  |
|                 | table (reward 4 all the same); settings are checkpoints of the search, a     |
|                 | small or narrow run, a lift-only reward, action noise                        |
| `dmp`           | Dynamic Movement Primitives: a kinematic keyframe teacher's task-space paths |
|                 | (TCP x, y, z and gripper heading, pitch, roll) for 1-9 cube poses are cut    |
|                 | into primitives (reach, carry, approach, retreats) and fitted by LWR, one    |
|                 | discrete DMP per dimension (spring-damper + Gaussian forcing of a phase); at |
|                 | run time goals sit on the observed cube, DMPs integrate at 50 Hz, IK every   |
|                 | step, grippers switch when a phase runs out; top-down grasp on the y faces,  |
|                 | tilted 35 degrees down toward -x at a hand-over above the centre, the left   |
|                 | comes up the same axis nose to nose and pinches the other half; settings:    |
|                 | basis count, demos, Ijspeert scaling, tau fast/slow, phase stopping gain,    |
|                 | pose bias, goal coupling off                                                 |
| `rrt`           | sampling-based planning: each transit (right to its pre-grasp, right         |
|                 | carrying, left to its staging) is planned per phase by RRT-Connect in the    |
|                 | arm's 6-D joint space from IK goals, checked against capsules from MuJoCo FK |
|                 | (table plane, cube sphere, the other arm, the held cube), shortcut, then one |
|                 | trapezoid under joint velocity/acceleration limits; approaches and lifts are |
|                 | straight IK lines; top-down grasp on the x faces, tips 1.5 cm up, high hand- |
|                 | over at the centre; the left comes level from -x once the cube is there and  |
|                 | pinches the lower y faces; settings: fast/slow limits, raw paths with big    |
|                 | steps, random IK branch, 1-iteration budget, too wide a margin               |
| `lqr`           | optimal control: each arm's move between phase goals is a finite-horizon     |
|                 | iLQR in joint space, solved when the phase starts from the measured joints,  |
|                 | on a per-joint first-order servo lag fitted to the world's step responses    |
|                 | (state q, q_prev); costs on joint velocity, acceleration and command lead,   |
|                 | and on the TCP pose error (FK, Gauss-Newton) over the horizon's last fifth;  |
|                 | replayed with a share of the time-varying LQR gains; grippers switch at      |
|                 | phase starts. Top-down grasp on the y faces holding the upper half, lift,    |
|                 | high hand-over left of centre; the left comes level from -x and pinches the  |
|                 | lower half of the y faces under the right's tips; settings: 1-3 iterations,  |
|                 | open loop, full gains, slow servo model, heavy control, low goal weight,     |
|                 | noisy cube reading                                                           |
| `miscal`        | plans on a miscalibrated copy of the MJCF and sends its joints to the true   |
|                 | robot, so hands land off by what the errors imply, no noise: encoder zero    |
|                 | offsets, upper-arm length, base shift and yaw, camera extrinsic error on the |
|                 | cube reading, gripper command-to-opening map; optional touch-off (the tool   |
|                 | offset at the rest pose measured once and corrected). Joint keyframes solved |
|                 | once by IK, minimum-jerk; the right grasps from its own side, 60 degrees     |
|                 | down, on the y faces, believed 15 mm squeeze, carries the cube unturned to a |
|                 | hand-over in front of and left of centre; the left re-reads the cube, comes  |
|                 | level from -x, wrist rolled a quarter turn, and pinches the top and bottom   |
|                 | faces of its -x half; settings: each error, combined, touched off            |
| `solo`          | Cartesian minimum-jerk paths (rotations along the geodesic), damped least-   |
|                 | squares IK every step; no hand-over: the left alone picks. If the cube lies  |
|                 | over 0.50 m from the left's base, the right comes down top-down with its     |
|                 | fingers open around it and slides it along -x with its trailing pad (the     |
|                 | leading pad cages it) to 0.43 m from the left's base, centres its pads off   |
|                 | the faces and rises away; the left re-reads the cube where it lies and comes |
|                 | down top-down on the face pair nearer its unturned finger axis, closes,      |
|                 | lifts 12 cm; settings: tilted approach, short or no push, joint noise, grasp |
|                 | off along the finger axis, stale (first-step) cube reading, weak squeeze,    |
|                 | high grasp, early close                                                      |
| `knn`           | nonparametric retrieval (VINN-like): every 8 steps it finds the 4 nearest of |
|                 | 100 stored state-only demos of its own scripted teacher (each demo's best    |
|                 | step within 40 of the clock, by joints, cube position at 10 rad/m and time)  |
|                 | and plays the softmax blend of their next 8 actions; never an image. The     |
|                 | teacher: joint keyframes solved once by IK, smoothstep; the right comes top- |
|                 | down, wrist rolled so its fingers close across the cube's x faces, holds the |
|                 | upper part and carries it top-down to a high hand-over just right of centre; |
|                 | the left comes from -x pointing 15 degrees up and pinches the y faces under  |
|                 | the right's fingers. Demos from Halton cube poses over the ID box + 3 cm;    |
|                 | settings: k = 1, a plain mean of 20, 20 or 8 demos, low or zero cube weight, |
|                 | action noise, a stale cube reading, a 100-step open-loop chunk on a late     |
|                 | reading                                                                      |
| `twohand`       | joint-space minimum-jerk move to the pre-grasp (IK solved once on the landed |
|                 | cube), then synchronised straight Cartesian lines, smoothstep, damped        |
|                 | least-squares IK every step; no hand-over: both arms come down on the cube   |
|                 | on the table together, mirror images, each tilted 0.45 rad toward the other  |
|                 | (wrists apart), and close at the same step on the same pair of faces (the    |
|                 | normal nearest y), the left on its -x half, the right on its +x half; they   |
|                 | lift it 8 cm together, then the right opens, backs off along its approach    |
|                 | and rises while the left holds it up; settings: stale (still dropping) cube  |
|                 | reading, late left, right dragging as it backs off, joint noise, weak left   |
|                 | squeeze, early release with a weak left, high or outward left grasp          |
| `promp`         | probabilistic movement primitives (ProMP): per arm joint, 30 normalised      |
|                 | Gaussian basis functions of phase, a full Gaussian over the 360 stacked      |
|                 | weights and the cube's initial x, y, fitted on 60 state-only demos of its    |
|                 | own teacher; at step 0 it conditions on the cube reading and plays the       |
|                 | conditioned mean joint path open loop, grippers switched at fitted phases;   |
|                 | never an image. The teacher: joint keyframes by IK, minimum-jerk; the right  |
|                 | comes top-down across the y faces, lifts and turns its wrist a quarter turn  |
|                 | on the way to a hand-over left of centre; the left comes from -x rising 20   |
|                 | degrees and pinches the free y faces low; settings: 6 basis functions, heavy |
|                 | ridge, 4 demos, vague conditioning, tempered samples, noisy cube reading,    |
|                 | 1.8x time scale, unconditioned mean                                          |
| `gmr`           | Gaussian mixture regression (Calinon's GMM/GMR): a 64-component full-        |
|                 | covariance GMM over [phase, the cube's bearing and distance from the right's |
|                 | base, 14 commands, 12 measured arm joints], fitted by EM (phase bins x cube  |
|                 | quadrants start) on 40 state-only demos of its own teacher; each step it     |
|                 | conditions on the phase and the first cube reading and plays the conditional |
|                 | mean command plus a proprio feedback term toward the conditional mean        |
|                 | joints; never an image. The teacher: joint keyframes by IK, minimum-jerk;    |
|                 | the right comes top-down, wrist rolled so its fingers close across the x     |
|                 | faces, holds the upper part and carries it top-down to a hand-over right of  |
|                 | centre and in front; the left comes from -x pitched 25 degrees down and      |
|                 | pinches the y faces low; settings: 8 components, 5 demos, heavy covariance   |
|                 | regularisation, one EM iteration from a random start, stiff feedback, open   |
|                 | loop, a heavy command low-pass, noisy cube reading, 2.5x time scale          |
| `whip`          | time-optimal moves under velocity and acceleration limits (bang-coast-bang,  |
|                 | jerk limited by an FIR blend), PTP joint transits, then LIN Cartesian lines, |
|                 | IK every step, each move starting when the last ends; the right comes from   |
|                 | its own side, 69 degrees down, fingers along y, TCP on its approach axis     |
|                 | above the cube's centre, closes, lifts 5 cm and whips the cube unturned to a |
|                 | hand-over above the centre; the left, 29 degrees down from above its side,   |
|                 | re-reads the cube there and pinches the lower -x part of the same y faces    |
|                 | under the right's tips; the right opens and backs off along its approach;    |
|                 | settings: faster limits up to 100 m/s^2 with no blend (the servos overshoot  |
|                 | and fling the cube out of the grip on the carry), light squeeze, fingertip   |
|                 | hold, noisy cube reading, slow and safe limits                               |
| `probe`         | tactile search on a coarse cube reading: it reads the cube's x, y once with  |
|                 | a per-episode bias and noise, comes down top-down where it believes the cube |
|                 | is, fingers on the y faces, and judges the grasp by feel: fingers shut on    |
|                 | nothing or stalled too wide, or a TCP stopped high (a finger on the cube's   |
|                 | top, then it does not close), is a miss; it opens, rises and comes down      |
|                 | again at the next offset of a cross-then-diagonals search pattern around its |
|                 | first guess, up to 3 tries; minimum-jerk TCP lines, IK every step. After a   |
|                 | judged hold it lifts and turns the cube an eighth turn about the vertical on |
|                 | the way to a hand-over just left of centre; the left never reads the cube,   |
|                 | takes it where the right's measured joints say it is, comes in diagonally    |
|                 | (heading 45 degrees) nearly level under the right's hand, pinches the free   |
|                 | faces and checks its take by its finger opening, searching along its closing |
|                 | axis on a miss; then the right opens and rises away (a cube held far off the |
|                 | middle of the right's pads is shoved by the left's take and may fall after   |
|                 | the release); settings: good reader, one try, worse and far worse readers,   |
|                 | tiny search step, thresholds that take a miss for a hold or a hold for a     |
|                 | miss, light squeeze, 0.4x speed                                              |
| `slide`         | Cartesian straight lines, smoothstep, damped least-squares IK every step     |
|                 | after a joint-space minimum-jerk first move; no carry through the air: the   |
|                 | right comes top-down, closes low on the cube's y faces (tips 5 mm above the  |
|                 | table) and drags it along the table to a point left of centre, its height    |
|                 | trimmed by an integral on its FK-measured height so the cube skims the       |
|                 | table, then opens, rises and returns home; the left, staged behind and       |
|                 | above, re-reads the cube where it now lies, comes top-down with its wrist    |
|                 | turned a quarter turn, pinches the free x faces and lifts it; settings:      |
|                 | stale (pre-drag) cube reading, crawling and slow drags, a drag target at the |
|                 | edge of the left's reach, left grasp offset, light squeeze, release long     |
|                 | before the drag ends, tips pressed onto the table with a fast drag,          |
|                 | fingertip drag                                                               |

`arm.py` is their own kinematics (MuJoCo FK + damped least-squares IK), `common.py` what they share. The
folder `benchmarks` must be on `sys.path` (pytest's `pythonpath` has it; elsewhere `PYTHONPATH=benchmarks`).
"""
