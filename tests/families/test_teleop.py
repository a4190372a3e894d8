"""The `teleop` family acts as claimed in the real MuJoCo reference world: a pitched diagonal grasp with the
fingers squared to the cube's x faces, the wrist pitched up on the carry, a coaxial take from below with
crossed fingers left of the table's centre; hand paths made of overlapping corrective sub-movements with an
8-12 Hz tremor on top; a grip closed by feel; a release on the left's opening seen `delay` steps late; its
knobs do what they are labelled.

Every measurement is taken on the recorded trajectory (actions, proprio, cube poses), with gripper poses
from MuJoCo's own kinematics of the recorded joints, not from the family's.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from test_families import _first_close, _gripper_axes, _tcp

from families.arm import load_model
from families.measure import initial_poses, play
from families.teleop import FAMILY_SETTINGS, HANDOVER, TREMOR_BAND, TeleopKnobs

NOMINAL = TeleopKnobs()


def _commanded_tcp(episode: dict, side: str = "right") -> np.ndarray:
    """(T, 3) TCP positions of the commanded joints (the actions), from MuJoCo's kinematics."""
    model = load_model()
    data = mujoco.MjData(model)
    body = model.body(f"vx300s_{side}/gripper_link").id
    cols, adr = (slice(7, 13), slice(8, 14)) if side == "right" else (slice(0, 6), slice(0, 6))
    out = []
    for q in episode["actions"][:, cols]:
        data.qpos[adr] = q
        mujoco.mj_kinematics(model, data)
        out.append(data.xpos[body] + data.xmat[body].reshape(3, 3) @ np.array([0.125, 0.0, 0.0]))
    return np.array(out)


def _smooth(x: np.ndarray, n: int = 5) -> np.ndarray:
    """Box filter over `n` steps along axis 0 (5 steps at 50 Hz null a 10 Hz tremor)."""
    kernel = np.ones(n) / n
    return np.stack([np.convolve(x[:, i], kernel, mode="same") for i in range(x.shape[1])], axis=1)


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


@pytest.fixture(scope="module")
def nominal(poses) -> list[dict]:
    return play("teleop", {}, poses, num_envs=3, record=True)


def test_settings_are_ten_and_valid():
    assert len(FAMILY_SETTINGS) == 10 and FAMILY_SETTINGS["nominal"] == {}
    for kwargs in FAMILY_SETTINGS.values():
        TeleopKnobs(**kwargs)  # every setting names real knobs with valid values
    with pytest.raises(ValueError):
        TeleopKnobs(undershoot=0.0)


def test_nominal_grasps_diagonally_and_takes_coaxially_from_below(nominal):
    for episode in nominal:
        assert episode["success"]
        grasp = _first_close(episode["actions"], 13)
        right = _gripper_axes(episode, "right", grasp)
        pitch = np.degrees(np.arcsin(-right[2, 0]))
        heading = np.degrees(np.arctan2(right[1, 0], right[0, 0]))
        assert 50 < pitch < 70 and 120 < heading < 150  # 60 degrees down, pointing between -x and +y
        closing = right[:2, 1] / np.linalg.norm(right[:2, 1])
        assert abs(closing[0]) > 0.95  # seen from above, the fingers close across the cube's x faces
        assert abs(right[2, 1]) > 0.15  # ... tilted off the horizontal by the pitched approach
        take = _first_close(episode["actions"], 6)
        right, left = _gripper_axes(episode, "right", take), _gripper_axes(episode, "left", take)
        assert 15 < np.degrees(np.arcsin(-right[2, 0])) < 35  # the right's wrist has pitched up ...
        assert right[:, 0] @ left[:, 0] < -0.95  # ... and the left comes up its axis from below
        assert left[2, 0] > 0.3 and abs(right[:, 1] @ left[:, 1]) < 0.25  # fingers crossed
        assert np.linalg.norm(episode["cubes"][take, :3] - HANDOVER) < 0.04  # left of centre, in the air
        assert episode["cubes"][take, 0] < -0.04
        gap = (_tcp(episode, "right", take) - _tcp(episode, "left", take)) @ right[:, 0]
        assert -0.09 < gap < -0.05  # each hand holds one half: the finger tips meet near the centre


def test_hand_path_is_overlapping_submovements_with_corrections(nominal):
    for episode in nominal:
        grasp = _first_close(episode["actions"], 13)
        tcp = _smooth(_commanded_tcp(episode))[:grasp]
        speed = np.linalg.norm(np.diff(tcp, axis=0), axis=1) / 0.02  # m/s, tremor filtered out
        peaks = [t for t in range(1, len(speed) - 1) if speed[t] >= speed[t - 1] and speed[t] > speed[t + 1]]
        peaks = [t for t in peaks if speed[t] > 0.02]
        assert len(peaks) >= 4  # reach and descent each in a primary and corrective sub-movements
        assert speed[peaks[0]] == max(speed[p] for p in peaks[:3])  # the primary is the largest
        gaps = np.diff(peaks)
        assert np.median(gaps) >= 6  # corrections start every 160-300 ms, not every step
        dips = [speed[a:b].min() / min(speed[a], speed[b]) for a, b in zip(peaks, peaks[1:], strict=False)]
        assert min(dips) < 0.9 and np.median(dips) > 0.05  # they overlap: speed dips, rarely to rest


def _shake(episode: dict, start: int, stop: int) -> tuple[float, float]:
    """Share of the commanded TCP's power above 5 Hz that lies in the tremor band (+-1 Hz), and the RMS (m)
    of that high-passed motion, over steps `start`..`stop`: the sub-movements live below 5 Hz."""
    tcp = _commanded_tcp(episode)[start:stop]
    spectrum = np.fft.rfft((tcp - tcp.mean(0)) * np.hanning(len(tcp))[:, None], axis=0)
    freqs = np.fft.rfftfreq(len(tcp), 0.02)
    spectrum[freqs < 5.0] = 0.0
    shake = np.fft.irfft(spectrum, n=len(tcp), axis=0)[10:-10]
    power = (np.abs(spectrum) ** 2).sum(1)
    band = (freqs >= TREMOR_BAND[0] - 1) & (freqs <= TREMOR_BAND[1] + 1)
    return float(power[band].sum() / power.sum()), float(np.sqrt((shake**2).sum(1).mean()))


def test_tremor_is_band_limited_and_grows_with_fatigue(poses, nominal):
    share, rms = _shake(nominal[0], 20, 380)
    assert share > 0.9 and 0.0002 < rms < 0.002  # a millimetre or so past the lag's low-pass, at 8-12 Hz
    steady = _shake(nominal[0], 280, 380)[1] / _shake(nominal[0], 20, 120)[1]
    tired = play("teleop", {"fatigue": 4.0}, poses[:1], num_envs=1, record=True)[0]
    grown = _shake(tired, 280, 380)[1] / _shake(tired, 20, 120)[1]
    assert steady < 1.4 and grown > 1.7  # the tired hand's tremor has grown over the episode
    assert _shake(tired, 280, 380)[0] > 0.9


def test_grip_is_closed_by_feel_then_held_past_the_stall(poses, nominal):
    weak = play("teleop", {"squeeze": 0.15}, poses[:2], num_envs=2, record=True)
    for squeeze, episodes in ((NOMINAL.squeeze, nominal[:2]), (0.15, weak)):
        for episode in episodes:
            command, opening = episode["actions"][:, 13], episode["states"][:, 13]
            close = _first_close(episode["actions"], 13)
            lift = close + int(np.nonzero(np.diff(_commanded_tcp(episode)[close:, 2]) > 0.002)[0][0])
            assert 0.6 < opening[lift] < 0.85  # the fingers stalled on the 4 cm cube
            held = command[lift - 3 : lift + 1]
            assert np.ptp(held) < 0.01  # the grip was set before the lift ...
            assert held[-1] == pytest.approx(
                max(0.0, opening[lift] - squeeze), abs=0.05
            )  # ... past the stall


def test_depth_bias_grasps_that_far_off_the_cube(poses, nominal):
    biased = play("teleop", {"depth_bias": 0.03}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, biased, strict=False):
        offsets = []
        for episode in (good, bad):
            close = _first_close(episode["actions"], 13)
            offsets.append(_tcp(episode, "right", close)[:2] - episode["cubes"][close, :2])
        assert np.linalg.norm(offsets[0]) < 0.012
        assert offsets[1][1] - offsets[0][1] == pytest.approx(0.03, abs=0.01)
        assert abs(offsets[1][0] - offsets[0][0]) < 0.012
        assert not bad["success"]


def test_impatient_operator_closes_before_the_hand_is_down(poses, nominal):
    impatient = play("teleop", {"tolerance": 0.07}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, impatient, strict=False):
        heights = []
        for episode in (good, bad):
            close = _first_close(episode["actions"], 13)
            heights.append(_tcp(episode, "right", close)[2] - episode["cubes"][close, 2])
        assert heights[0] < 0.035 and heights[1] - heights[0] > 0.015  # the hand stopped that much higher


def _release(episode: dict) -> int:
    """Step at which the right's grip command starts opening for good (rising 5 steps in a row) after the
    right has closed on the cube."""
    command = episode["actions"][:, 13]
    close = _first_close(episode["actions"], 13)
    rising = np.diff(command[close:]) > 0
    return close + 1 + next(t for t in range(len(rising) - 5) if rising[t : t + 5].all())


def test_release_follows_the_left_opening_seen_late(poses, nominal):
    delay, wait, cue = NOMINAL.delay, NOMINAL.release_wait, NOMINAL.release_opening
    for episode in nominal:
        opening, take, release = (
            episode["states"][:, 6],
            _first_close(episode["actions"], 6),
            _release(episode),
        )
        below = take + int(np.nonzero(opening[take:] < cue)[0][0])
        assert release - below >= delay + wait  # the operator waited to see it closed and still ...
        seen = opening[release - delay - wait : release - delay + 1]  # ... in the frames seen by then
        assert seen.max() < cue and np.all(np.abs(np.diff(seen)) < 0.004)
    early = play("teleop", {"release_reach": 0.06}, poses[:2], num_envs=2, record=True)
    for episode in early:
        release, take = _release(episode), _first_close(episode["actions"], 6)
        assert release < take  # let go on seeing the left's hand come, before its fingers closed
        assert episode["states"][release, 6] > 0.9 and episode["max_reward"] >= 2


def test_an_episode_plays_the_same_in_any_batch(poses, nominal):
    alone = play("teleop", {}, poses[1:2], num_envs=1, record=True)[0]
    np.testing.assert_allclose(alone["actions"], nominal[1]["actions"], atol=1e-5)
