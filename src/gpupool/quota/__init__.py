"""Tenant quotas, pure: spec and book, ledger, admission, reclaim, queue, leases, metering,
budgets and idle lending.

No clock and no I/O: callers pass time in as float seconds and act on the returned decisions.
"""

from gpupool.quota.admission import Admit, Ask, Reject, Verdict, Wait, WaitReason, decide
from gpupool.quota.book import QuotaBook
from gpupool.quota.budget import BudgetStatus, budget_status
from gpupool.quota.idle import RecentPeak, recent_peak
from gpupool.quota.lease import IllegalLeaseTransition, Lease, LeasePhase
from gpupool.quota.ledger import Ledger
from gpupool.quota.metering import Meter, TenantUsage
from gpupool.quota.queue import AdmissionQueue, FifoMode, Outcome, QueueEntry, Waiting
from gpupool.quota.reclaim import Evict, NoReclaim, Notice, ReclaimPlan, due, plan_reclaim
from gpupool.quota.reclaim_sites import SitePlan, plan_site_reclaim
from gpupool.quota.resource import Resource, charge_problem, demand_of, held_amount
from gpupool.quota.spec import Budget, OnExhaustion, TenantQuota

__all__ = [
    "AdmissionQueue",
    "Admit",
    "Ask",
    "Budget",
    "BudgetStatus",
    "Evict",
    "FifoMode",
    "IllegalLeaseTransition",
    "Lease",
    "LeasePhase",
    "Ledger",
    "Meter",
    "NoReclaim",
    "Notice",
    "OnExhaustion",
    "Outcome",
    "QueueEntry",
    "QuotaBook",
    "RecentPeak",
    "ReclaimPlan",
    "Reject",
    "Resource",
    "SitePlan",
    "TenantQuota",
    "TenantUsage",
    "Verdict",
    "Wait",
    "WaitReason",
    "Waiting",
    "budget_status",
    "charge_problem",
    "decide",
    "demand_of",
    "due",
    "held_amount",
    "plan_reclaim",
    "plan_site_reclaim",
    "recent_peak",
]
