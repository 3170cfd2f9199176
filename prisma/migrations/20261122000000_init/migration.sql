-- CreateSchema
CREATE SCHEMA IF NOT EXISTS "public";

-- CreateExtension
CREATE EXTENSION IF NOT EXISTS "pg_trgm";

-- CreateEnum
CREATE TYPE "AccountType" AS ENUM ('parent', 'child');

-- CreateEnum
CREATE TYPE "AccountStatus" AS ENUM ('active', 'inactive', 'locked');

-- CreateEnum
CREATE TYPE "AuthProvider" AS ENUM ('email', 'providerA', 'providerB', 'providerC', 'providerD');

-- CreateEnum
CREATE TYPE "PackageType" AS ENUM ('STARTER', 'GROWTH', 'SCALE');

-- CreateTable
CREATE TABLE "Account" (
    "id" TEXT NOT NULL,
    "type" "AccountType" NOT NULL,
    "parentId" TEXT,
    "username" TEXT NOT NULL,
    "email" TEXT NOT NULL,
    "publicKey" TEXT NOT NULL,
    "status" "AccountStatus" NOT NULL DEFAULT 'active',
    "emailVerified" BOOLEAN NOT NULL DEFAULT false,
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "lastLogin" TIMESTAMPTZ(3),
    "authProvider" "AuthProvider" NOT NULL DEFAULT 'email',
    "lastLoginProvider" "AuthProvider",
    "providerAId" TEXT,
    "childSignupCount" INTEGER NOT NULL DEFAULT 0,
    "signInCount" INTEGER NOT NULL DEFAULT 0,
    "emailConfirmationCount" INTEGER NOT NULL DEFAULT 0,
    "providerAAuthCount" INTEGER NOT NULL DEFAULT 0,
    "providerBAuthCount" INTEGER NOT NULL DEFAULT 0,
    "providerCAuthCount" INTEGER NOT NULL DEFAULT 0,
    "providerDAuthCount" INTEGER NOT NULL DEFAULT 0,
    "lastPasswordChanged" TIMESTAMPTZ(3),
    "loginAttempts" INTEGER NOT NULL DEFAULT 0,
    "lastLoginAttempt" TIMESTAMPTZ(3),
    "lockedUntil" TIMESTAMPTZ(3),
    "lastResetPasswordRequestAt" TIMESTAMPTZ(3),
    "passwordHash" TEXT,
    "emailVerificationToken" TEXT,
    "passwordResetToken" TEXT,

    CONSTRAINT "Account_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Organization" (
    "parentId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "url" TEXT NOT NULL,
    "signinUrl" TEXT NOT NULL,
    "signupUrl" TEXT NOT NULL,
    "verifyUrl" TEXT NOT NULL,
    "resetUrl" TEXT NOT NULL,
    "updateUrl" TEXT NOT NULL,
    "resendUrl" TEXT NOT NULL,
    "successfulUrl" TEXT NOT NULL,
    "domainRestrictionEnabled" BOOLEAN NOT NULL DEFAULT true,
    "emailVerificationRequired" BOOLEAN NOT NULL DEFAULT false,
    "providerASsoEnabled" BOOLEAN NOT NULL DEFAULT false,
    "providerASsoClientId" TEXT NOT NULL DEFAULT '',
    "providerASsoClientSecret" TEXT,
    "jwtSecret" TEXT NOT NULL,
    "encryptionKey" TEXT,
    "encryptionIv" TEXT,
    "creditBalance" INTEGER NOT NULL DEFAULT 0,
    "totalFreeUsers" INTEGER NOT NULL DEFAULT 0,
    "accountBalance" DECIMAL(14,2) NOT NULL DEFAULT 0,
    "availableBalance" DECIMAL(14,2) NOT NULL DEFAULT 0,
    "lastLowCreditNotificationAt" TIMESTAMPTZ(3),
    "lastCriticalCreditNotificationAt" TIMESTAMPTZ(3),
    "lastDepletedCreditNotificationAt" TIMESTAMPTZ(3),
    "detailsRetrievalCount" BIGINT NOT NULL DEFAULT 0,
    "lastDetailsRetrievalAt" TIMESTAMPTZ(3),
    "createdAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Organization_pkey" PRIMARY KEY ("parentId")
);

-- CreateTable
CREATE TABLE "PackagePurchase" (
    "transactionId" TEXT NOT NULL,
    "organizationId" TEXT NOT NULL,
    "packageType" "PackageType" NOT NULL,
    "purchasedAt" TIMESTAMPTZ(3) NOT NULL,
    "creditsAdded" INTEGER NOT NULL,
    "freeUsersAdded" INTEGER NOT NULL,
    "price" DECIMAL(12,2) NOT NULL,

    CONSTRAINT "PackagePurchase_pkey" PRIMARY KEY ("transactionId")
);

-- CreateTable
CREATE TABLE "MonthlyUsage" (
    "organizationId" TEXT NOT NULL,
    "month" DATE NOT NULL,
    "childSignups" INTEGER NOT NULL DEFAULT 0,
    "signIns" INTEGER NOT NULL DEFAULT 0,
    "emailVerifications" INTEGER NOT NULL DEFAULT 0,
    "providerAAuths" INTEGER NOT NULL DEFAULT 0,
    "providerBAuths" INTEGER NOT NULL DEFAULT 0,
    "providerCAuths" INTEGER NOT NULL DEFAULT 0,
    "providerDAuths" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "MonthlyUsage_pkey" PRIMARY KEY ("organizationId","month")
);

-- CreateIndex
CREATE UNIQUE INDEX "Account_publicKey_key" ON "Account"("publicKey");

-- CreateIndex
CREATE INDEX "Account_parentId_createdAt_id_idx" ON "Account"("parentId", "createdAt" DESC, "id" DESC);

-- CreateIndex
CREATE INDEX "Account_parentId_lastLogin_idx" ON "Account"("parentId", "lastLogin");

-- CreateIndex
CREATE INDEX "Account_username_trgm_idx" ON "Account" USING GIN ("username" gin_trgm_ops);

-- CreateIndex
CREATE INDEX "Account_email_trgm_idx" ON "Account" USING GIN ("email" gin_trgm_ops);

-- CreateIndex
CREATE INDEX "PackagePurchase_organizationId_purchasedAt_idx" ON "PackagePurchase"("organizationId", "purchasedAt" DESC);

-- AddForeignKey
ALTER TABLE "Account" ADD CONSTRAINT "Account_parentId_fkey" FOREIGN KEY ("parentId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Organization" ADD CONSTRAINT "Organization_parentId_fkey" FOREIGN KEY ("parentId") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "PackagePurchase" ADD CONSTRAINT "PackagePurchase_organizationId_fkey" FOREIGN KEY ("organizationId") REFERENCES "Organization"("parentId") ON DELETE CASCADE ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "MonthlyUsage" ADD CONSTRAINT "MonthlyUsage_organizationId_fkey" FOREIGN KEY ("organizationId") REFERENCES "Organization"("parentId") ON DELETE CASCADE ON UPDATE CASCADE;

