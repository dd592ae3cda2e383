"""The rules of cluster launch control (``clusterlaunchcontrol``), each with the
sentence of the PTX ISA it rests on (9.7.13.17 ``clusterlaunchcontrol.try_cancel``,
9.7.13.18 ``clusterlaunchcontrol.query_cancel``, quoted from the ISA's text).

``RULES``: rule name -> that sentence (``family.Family.rules``).
"""

from __future__ import annotations

__all__ = ["RULES", "RESPONSE", "AFTER_FAILURE", "EXITED"]

RESPONSE, AFTER_FAILURE, EXITED = "clc-response", "clc-after-failure", "clc-exited"

RULES = {
    RESPONSE: "PTX ISA, clusterlaunchcontrol.query_cancel: \"Instruction "
              "clusterlaunchcontrol.query_cancel can be used to decode opaque response "
              "written by instruction clusterlaunchcontrol.try_cancel\" (a value no "
              "try_cancel wrote, such as the bytes before the response landed, has no "
              "meaning to decode)",
    AFTER_FAILURE: "PTX ISA, clusterlaunchcontrol.try_cancel: \"If the executing CTA has "
                   "already observed the completion of a clusterlaunchcontrol.try_cancel "
                   "instruction as failed, then the behavior of issuing a subsequent "
                   "clusterlaunchcontrol.try_cancel instruction is undefined.\"",
    EXITED: "PTX ISA, clusterlaunchcontrol.try_cancel: \"The behavior of instruction with "
            ".multicast::cluster::all qualifier is undefined if any CTA in the cluster is "
            "exited.\"",
}
